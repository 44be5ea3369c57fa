"""The one-pass Add / Sum with a fused activation (kernels.c nn_add_act_f32) against numpy's two passes."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import native
from nnhal.device.cpu.kernels import select
from nnhal.device.cpu.kernels.add import AddNative, SumNative
from nnhal.hostkernels.fused import Activation, fuse
from nnhal.hostkernels.op_add import AddKernel
from nnhal.hostkernels.select import select as host_select
from nnhal.operator.base import Info
from tests.device.cpu.test_nhwc_nn import make_node

needs_native = pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.status().reason}")

F32 = np.dtype(np.float32)
ACTS = {
    "relu": Activation("relu"),
    "clip": Activation("clip", lo=np.asarray(-0.5, F32), hi=np.asarray(0.75, F32)),
    "clip-high-only": Activation("clip", hi=np.asarray(6.0, F32)),
    "silu": Activation("silu"),
    "hardswish": Activation("hardswish"),
    "hardsigmoid": Activation("hardsigmoid", alpha=0.25, beta=0.4),
}


def _operands(shape, seed=0):
    rng = np.random.default_rng(seed)
    a, b = (rng.standard_normal(shape).astype(F32) * 4 for _ in range(2))
    a.reshape(-1)[::37] = np.nan
    b.reshape(-1)[5::41] = -np.inf
    return a, b


def _numpy(a, b, act):
    from nnhal.device.cpu.kernels._gates import apply_activation
    out = np.add(a, b)
    apply_activation(out, act)
    return out


@needs_native
@pytest.mark.parametrize("op", ["Add", "Sum"])
@pytest.mark.parametrize("act", sorted(ACTS))
def test_fused_add_matches_numpy(op, act):
    shape = (2, 9, 7, 40)                         # 5040 elements: not a multiple of a vector or a chunk
    a, b = _operands(shape)
    ins = [Info(F32, shape), Info(F32, shape)]
    node, outs = make_node(op, ins, {})
    kernel = select(node, ins, outs)
    assert isinstance(kernel, AddNative if op == "Add" else SumNative)
    assert not isinstance(host_select(node, ins, outs), (AddNative, SumNative))   # the host layer's own: numpy
    relu = make_node("Relu", outs, {})[0]
    fused = fuse(node, relu, activation=ACTS[act])
    run = kernel.prepare(fused, ins, outs)
    out = np.empty(shape, F32)
    with np.errstate(invalid="ignore", over="ignore"):
        got = run([a, b], [out])[0]
        want = _numpy(a, b, ACTS[act])
    assert got is out
    if act in ("relu", "clip", "clip-high-only", "hardswish", "hardsigmoid"):
        np.testing.assert_array_equal(got, want)                  # NaNs where numpy has them, same bits
    else:
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    # in place over input 0 (the planner's choice when it dies here), and a range of elements
    a2 = a.copy()
    native.add_act(a2, b, a2, native.make_act("relu"), 0, 100)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(a2.reshape(-1)[:100], _numpy(a, b, ACTS["relu"]).reshape(-1)[:100])
    np.testing.assert_array_equal(a2.reshape(-1)[100:], a.reshape(-1)[100:])


def test_broadcasting_or_other_dtypes_keep_numpy():
    for ins in ([Info(F32, (1, 8, 4, 4)), Info(F32, (1, 8, 1, 1))], [Info(np.dtype(np.float64), (3, 4))] * 2):
        node, outs = make_node("Add", ins, {})
        assert type(select(node, ins, outs)) is AddKernel


@needs_native
def test_a_residual_sum_with_relu_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")
    w = numpy_helper.from_array((np.random.default_rng(4).standard_normal((8, 8, 3, 3)) * 0.3).astype(F32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Sum", ["c", "x"], ["s"]), helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Add", ["r", "c"], ["a"]), helper.make_node("Clip", ["a", "", "six"], ["y"])]
    graph = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 8, 6, 6))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [w, numpy_helper.from_array(np.asarray(6.0, F32), "six")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = np.random.default_rng(5).standard_normal((2, 8, 6, 6)).astype(F32) * 3
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run({"x": x})[0]
        kernels = {n.op: n.kernel for n in s.profile({"x": x}, runs=1).nodes}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert kernels["Sum"] == kernels["Add"] == "native"
