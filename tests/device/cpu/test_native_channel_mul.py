"""The native per-channel Mul (kernels/mul.py: a squeeze-excite gate or a layer scale times a channels-last map)
against onnxruntime's Mul, and a squeeze-excite block through a Session against onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.conformance.tolerance import assert_within_bound, reduction_bound
from nnhal.device.cpu import native
from nnhal.device.cpu.kernels import select
from nnhal.device.cpu.kernels.mul import MulChannelNative
from nnhal.operator.base import Info
from tests.device.cpu.test_nhwc_nn import make_node

ort = pytest.importorskip("onnxruntime")
needs_native = pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.status().reason}")

F32 = np.dtype(np.float32)


def _ort_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """onnxruntime's Mul of a and b (numpy broadcasting)."""
    out = np.broadcast_shapes(a.shape, b.shape)
    graph = helper.make_graph(
        [helper.make_node("Mul", ["a", "b"], ["y"])], "mul",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, a.shape),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, b.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"a": a, "b": b})[0]


@needs_native
@pytest.mark.parametrize("full,gate,swap", [
    ((1, 9, 7, 40), (1, 1, 1, 40), False),       # batch 1: one gate
    ((3, 5, 11, 24), (3, 1, 1, 24), False),      # one gate per image
    ((3, 5, 11, 24), (1, 1, 1, 24), True),       # one gate for all images, gate first
    ((2, 13, 17), (17,), True),                  # a (C,) layer scale against a 3-D map
    ((4, 6, 33), (1, 33), False),
])
@pytest.mark.parametrize("parts", [1, 2])
def test_channel_mul_matches_onnxruntime(monkeypatch, full, gate, swap, parts):
    """One rounding per element: the same bits as onnxruntime's Mul (NaN and inf where it has them), out of place
    and in place over the map, on one and two native parts."""
    from nnhal.device.cpu import parallel

    monkeypatch.setattr(parallel, "native_parts", lambda work, units: min(parts, max(1, units)))
    rng = np.random.default_rng(len(full) + full[-1])
    x = (rng.standard_normal(full) * 3).astype(F32)
    g = rng.standard_normal(gate).astype(F32)
    x.reshape(-1)[::29] = np.nan
    x.reshape(-1)[3::31] = np.inf
    g.reshape(-1)[1] = 0.0
    operands = [g, x] if swap else [x, g]
    ins = [Info(F32, a.shape) for a in operands]
    node, outs = make_node("Mul", ins, {})
    kernel = select(node, ins, outs)
    assert isinstance(kernel, MulChannelNative)
    run = kernel.prepare(node, ins, outs)
    want = _ort_mul(*operands)
    out = np.empty(full, F32)
    with np.errstate(invalid="ignore"):
        got = run(list(operands), [out])[0]
    assert got is out
    np.testing.assert_array_equal(got, want)
    xs = x.copy()                                      # in place: the planner's choice when the map dies here
    with np.errstate(invalid="ignore"):
        got = run([g, xs] if swap else [xs, g], [xs])[0]
    np.testing.assert_array_equal(got, want)
    strided = np.zeros(full[:-1] + (2 * full[-1],), F32)[..., ::2]     # a non-contiguous map: copied first
    strided[...] = x
    with np.errstate(invalid="ignore"):
        got = run([g, strided] if swap else [strided, g], [None])[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("a,b,dtype", [
    ((1, 8, 4, 4), (1, 8, 4, 4), F32),           # same shapes: no gate
    ((1, 4, 4, 8), (1, 4, 1, 8), F32),           # a gate that varies along another axis
    ((1, 4, 4, 8), (1, 1, 1, 1), F32),           # a scalar, not a channel vector
    ((2, 2, 4, 8), (2, 1, 8), F32),              # (2, 1, 8) broadcasts as (1, 2, 1, 8): along H
    ((1, 4, 4, 8), (1, 1, 1, 8), np.dtype(np.float64)),
])
def test_other_muls_keep_the_host_kernels(a, b, dtype):
    ins = [Info(dtype, a), Info(dtype, b)]
    node, outs = make_node("Mul", ins, {})
    assert not isinstance(select(node, ins, outs), MulChannelNative)


def _se_model(c: int, squeeze: int, seed: int = 3):
    """Conv 1x1 -> HardSwish -> squeeze-excite (GlobalAveragePool, Conv, Relu, Conv, HardSigmoid, Mul) -> Conv 1x1:
    MobileNetV3's block tail, NCHW."""
    rng = np.random.default_rng(seed)
    ws = {"w0": rng.standard_normal((c, c, 1, 1)) / np.sqrt(c),
          "w1": rng.standard_normal((squeeze, c, 1, 1)) / np.sqrt(c),
          "w2": rng.standard_normal((c, squeeze, 1, 1)) / np.sqrt(squeeze),
          "w3": rng.standard_normal((c, c, 1, 1)) / np.sqrt(c)}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"]), helper.make_node("HardSwish", ["a"], ["h"]),
             helper.make_node("GlobalAveragePool", ["h"], ["p"]), helper.make_node("Conv", ["p", "w1"], ["q"]),
             helper.make_node("Relu", ["q"], ["r"]), helper.make_node("Conv", ["r", "w2"], ["s"]),
             helper.make_node("HardSigmoid", ["s"], ["gate"], alpha=1 / 6, beta=0.5),
             helper.make_node("Mul", ["h", "gate"], ["m"]), helper.make_node("Conv", ["m", "w3"], ["y"])]
    graph = helper.make_graph(
        nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, c, 9, 10))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, c, 9, 10))],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in ws.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@needs_native
def test_squeeze_excite_block_matches_onnxruntime():
    """The gate's Mul runs natively on the channels-last map inside the block; the block's result stays within the
    reassociation bound of its sums against onnxruntime: three chained sums of C terms (the project Conv over
    the gated map, whose gate went through a pooled mean and two more sums), each bounded by gamma_(C+1) of the
    sum of the terms' magnitudes, which |y| + the output's spread bounds generously."""
    c = 24
    model = _se_model(c, 8)
    x = np.random.default_rng(11).standard_normal((2, c, 9, 10)).astype(F32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    # each of the four Convs and the pool adds at most 2 gamma_(k+1) of its terms' magnitudes; the terms here stay
    # within a few times the output's largest magnitude
    bound = reduction_bound(np.full(want.shape, 8 * float(np.abs(want).max())), 4 * c + 9 * 10)
    for threads in (1, 2):
        with nnhal.Session(model, num_thread=threads) as s:
            (got,) = s.run({"x": x})
            kernels = {n.op: n.kernel for n in s.profile({"x": x}, runs=1).nodes}
        assert kernels["Mul"] == "native"
        assert_within_bound(got, want, bound)
