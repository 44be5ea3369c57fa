"""Small stacked products of two computed operands (kernels/matmul.py MatMulFast's numpy call for a stack, as
attention's score and value products of a decoder step): against a float64 product, with a transposed-view B,
a broadcast stack, into the planned output and into none; a decoder step's attention (its scale and mask fused
onto the score product) through a session against onnxruntime on both plan paths; a large or constant-B product
keeps the general path."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import nnhal
from nnhal.conformance.tolerance import assert_within_bound
from nnhal.device.cpu.kernels import matmul as mm
from nnhal.graph.node import Node
from nnhal.operator.base import Info
from tests.conftest import make_model, vinfo

F32 = np.dtype(np.float32)
U = np.finfo(np.float32).eps / 2


def _node():
    return Node("m", "MatMul", ["a", "b"], ["y"], {}, opset=17, version=17)


@pytest.mark.parametrize("a_shape, b_shape, transposed", [
    ((1, 4, 1, 64), (1, 4, 64, 65), True),       # a decoder step's scores: q @ K^T, K a transposed view
    ((1, 4, 1, 65), (1, 4, 65, 64), False),      # its values
    ((2, 3, 5, 8), (1, 3, 8, 7), False),         # a broadcast stack
    ((5, 8), (3, 8, 6), True),                   # a matrix times a stack
])
@pytest.mark.parametrize("into", ["planned", "none"])
def test_a_small_stack_is_numpys_product(a_shape, b_shape, transposed, into):
    rng = np.random.default_rng(len(a_shape) + b_shape[-1])
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape[:-2] + b_shape[:-3:-1]).astype(np.float32).swapaxes(-1, -2) if transposed \
        else rng.standard_normal(b_shape).astype(np.float32)
    out_shape = np.broadcast_shapes(a_shape[:-2], b_shape[:-2]) + (a_shape[-2], b_shape[-1])
    ins, outs = [Info(F32, a_shape), Info(F32, b_shape)], [Info(F32, out_shape)]
    assert mm._small_stack(ins, outs[0])
    run = mm.MatMulFast().prepare(_node(), ins, outs)
    y = np.full(out_shape, np.nan, np.float32) if into == "planned" else None
    (got,) = run([a, b], [y])
    if y is not None:
        assert got is y
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert got.shape == want.shape
    assert_within_bound(got, want, np.abs(a).astype(np.float64) @ np.abs(b) * (a_shape[-1] + 1) * U)


def test_the_general_path_keeps_large_and_constant_products():
    big = [Info(F32, (1, 8, 256, 64)), Info(F32, (1, 8, 64, 256))]
    assert not mm._small_stack(big, Info(F32, (1, 8, 256, 256)))                  # 33M multiply-adds
    constant = [Info(F32, (1, 4, 1, 64)), Info(F32, (4, 64, 8), value=np.zeros((4, 64, 8), np.float32))]
    assert not mm._small_stack(constant, Info(F32, (1, 4, 1, 8)))
    matrix = [Info(F32, (1, 4, 1, 64)), Info(F32, (64, 8))]                        # the prepared GEMV's case
    assert not mm._small_stack(matrix, Info(F32, (1, 4, 1, 8)))


def _attention(heads=4, past=9, depth=16):
    """One decoder step's attention over a KV cache: q @ K^T / sqrt(d) + mask, Softmax, @ V."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Div", ["s", "scale"], ["sd"]),
             helper.make_node("Add", ["sd", "mask"], ["sm"]),
             helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    inputs = [vinfo("q", [1, heads, 1, depth]), vinfo("k", [1, heads, past, depth]),
              vinfo("v", [1, heads, past, depth])]
    inits = [numpy_helper.from_array(np.array(np.sqrt(depth), np.float32), "scale"),
             numpy_helper.from_array((rng.standard_normal((1, 1, 1, past)) * 0.1).astype(np.float32), "mask")]
    return make_model(nodes, inputs, [vinfo("y", [1, heads, 1, depth])], inits)


@pytest.mark.parametrize("check", ["0", "1"])
def test_a_decoder_steps_attention_matches_onnxruntime(check, monkeypatch):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")
    monkeypatch.setenv("NNHAL_CHECK", check)
    model = _attention()
    rng = np.random.default_rng(8)
    feeds = {"q": rng.standard_normal((1, 4, 1, 16)).astype(np.float32),
             "k": rng.standard_normal((1, 4, 9, 16)).astype(np.float32),
             "v": rng.standard_normal((1, 4, 9, 16)).astype(np.float32)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = s.run(feeds)[0]
        kernels = [st.kernel_name for sg in s.subgraphs for st in sg.device_graph.steps if st.node.op_type == "MatMul"]
    assert all(k.startswith("fast") for k in kernels), kernels
    # scores of 16 products, a softmax (relative error a few units of 2^-24 per output), a weighted sum of 9
    # values: both engines in float32, other orders
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))
