"""The native channels-last pooling (kernels.c nn_pool_nhwc_f32, nn_global_pool_nhwc_f32) against numpy's
NHWC kernels and the NCHW reference, and against onnxruntime on whole models."""
from __future__ import annotations

import numpy as np
import pytest

from nnhal.device.cpu import native
from nnhal.device.cpu.kernels import _pool_native
from nnhal.hostkernels.select import force_reference
from nnhal.operator.base import Info
from tests.device.cpu.test_nhwc_nn import image, make_node, run_nchw, run_nhwc

needs_native = pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.status().reason}")

POOLS = {
    "3x3s2": {"kernel_shape": [3, 3], "strides": [2, 2]},
    "3x3s2p1": {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    "3x3s2ceil": {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    # ceil_mode windows that start inside the end padding: count_include_pad counts only up to the pad
    "2x2s2p1ceil": {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    "5x3asym": {"kernel_shape": [5, 3], "strides": [3, 2], "pads": [2, 1, 0, 2], "ceil_mode": 1},
    "3x3s1p1": {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
    "dil2": {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [2, 1, 1, 0], "dilations": [2, 3]},
}
# channel counts: below one 64-channel block, several blocks, blocks and a tail; after the 32-channel register
# blocks, 1 to 3 whole 8-lane vectors in registers (24, 16, 44) and the last c % 8 (44, 100, 5)
SHAPES = [(1, 24, 13, 13), (2, 128, 9, 8), (1, 100, 11, 12), (2, 16, 7, 9), (1, 44, 9, 10), (1, 5, 8, 8)]


def _numpy_nhwc(monkeypatch, node, ins, outs, x):
    with monkeypatch.context() as m:
        m.setattr(native, "available", lambda: False)
        return run_nhwc(node, ins, outs, [x])


def _with_specials(x: np.ndarray) -> np.ndarray:
    """NaN, +inf and -inf at a few places (NaN wins a max, -inf loses to the padding's -inf tie)."""
    x = x.copy()
    flat = x.reshape(-1)
    flat[::97] = np.nan
    flat[5::89] = -np.inf
    flat[11::101] = np.inf
    return x


@needs_native
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("pool", sorted(POOLS))
def test_max_pool_native_equals_numpy(monkeypatch, pool, shape):
    x = _with_specials(image(shape))
    ins = [Info(x.dtype, x.shape)]
    node, outs = make_node("MaxPool", ins, POOLS[pool])
    got = run_nhwc(node, ins, outs, [x])
    with force_reference():
        want = run_nchw(node, ins, outs, [x])
    np.testing.assert_array_equal(got, want)
    if "dilations" not in POOLS[pool]:
        np.testing.assert_array_equal(got, _numpy_nhwc(monkeypatch, node, ins, outs, x))


@needs_native
@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("pool", sorted(POOLS))
def test_average_pool_native_matches_numpy(monkeypatch, pool, shape, include_pad):
    x = image(shape)
    ins = [Info(x.dtype, x.shape)]
    node, outs = make_node("AveragePool", ins, {**POOLS[pool], "count_include_pad": include_pad})
    got = run_nhwc(node, ins, outs, [x])
    with force_reference():
        want = run_nchw(node, ins, outs, [x])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    if "dilations" not in POOLS[pool]:
        np.testing.assert_allclose(got, _numpy_nhwc(monkeypatch, node, ins, outs, x), rtol=1e-6, atol=1e-6)


@needs_native
def test_average_pool_nan_and_inf_propagate():
    x = _with_specials(image((1, 24, 13, 13)))
    ins = [Info(x.dtype, x.shape)]
    node, outs = make_node("AveragePool", ins, POOLS["3x3s2p1"])
    got = run_nhwc(node, ins, outs, [x])
    with force_reference(), np.errstate(invalid="ignore"):
        want = run_nchw(node, ins, outs, [x])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))


@needs_native
@pytest.mark.parametrize("kind", ["max", "avg_pad"])
def test_pool_rows_and_channel_slice(kind):
    """Row ranges compose to the whole output, and a channel slice of a wider tensor gets the same values
    while the channels around it stay untouched."""
    shape = (2, 72, 15, 14)
    x = image(shape)
    ins = [Info(x.dtype, x.shape)]
    op = "MaxPool" if kind == "max" else "AveragePool"
    node, outs = make_node(op, ins, {**POOLS["3x3s2p1"], "count_include_pad": 1} if op == "AveragePool"
                           else POOLS["3x3s2p1"])
    g = _pool_native.geometry(node, ins, outs)
    n, c, oh, ow = outs[0].shape
    xh = x.transpose(0, 2, 3, 1).copy()
    whole = np.empty((n, oh, ow, c), np.float32)
    _pool_native.make_pool(g, shape, kind)(xh, whole)
    pool = native.Pool2d((n, 15, 14, c, oh, ow, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1), native.POOLS[kind])
    parts = np.full_like(whole, np.nan)
    for r0, r1 in [(0, 3), (3, 11), (11, n * oh)]:
        pool.run(xh, parts, r0, r1, 1)
    np.testing.assert_array_equal(parts, whole)
    wide = np.full((n, oh, ow, c + 40), 7.0, np.float32)
    _pool_native.make_pool(g, shape, kind)(xh, wide[..., 16:16 + c])
    np.testing.assert_array_equal(wide[..., 16:16 + c], whole)
    assert np.all(wide[..., :16] == 7.0) and np.all(wide[..., 16 + c:] == 7.0)


@needs_native
@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(1, 1280, 7, 7), (3, 40, 5, 9), (2, 72, 1, 1)])
def test_global_pool_native_equals_numpy(monkeypatch, op, shape):
    """Bit for bit: the native kernel sums each channel in the pixels' order, as np.mean(axis=1) does."""
    x = _with_specials(image(shape)) if op == "GlobalMaxPool" else image(shape)
    ins = [Info(x.dtype, x.shape)]
    node, outs = make_node(op, ins, {})
    got = run_nhwc(node, ins, outs, [x])
    np.testing.assert_array_equal(got, _numpy_nhwc(monkeypatch, node, ins, outs, x))


@needs_native
@pytest.mark.parametrize("kind", ["avg", "max"])
@pytest.mark.parametrize("shape", [(1, 7, 7, 1280), (1, 28, 28, 72), (3, 5, 9, 40), (2, 4, 4, 130), (1, 3, 3, 64)])
@pytest.mark.parametrize("parts", [1, 2, 3, 7])
def test_global_pool_splits_channels_bit_for_bit(kind, shape, parts):
    """The native global pool's parts split an image's blocks of channels too (a batch of one runs on every thread):
    whatever the split, each channel is reduced over the pixels in order, the bits of np.mean / np.max (axis 1)."""
    x = _with_specials(image(shape)) if kind == "max" else image(shape)
    n, h, w, c = shape
    want = (np.max if kind == "max" else np.mean)(x.reshape(n, h * w, c), axis=1)
    got = np.full(n * c, np.nan, np.float32)
    native.global_pool(x, got, native.POOLS[kind], parts)
    np.testing.assert_array_equal(got.reshape(n, c), want)


def _pool_model(op: str, shape: tuple, attrs: dict):
    from onnx import TensorProto, helper
    # a Conv in front makes the CPU layout pass run the pool channels last
    c = shape[1]
    w = helper.make_tensor("w", TensorProto.FLOAT, [c, c, 1, 1],
                           np.random.default_rng(1).standard_normal(c * c).astype(np.float32) / np.sqrt(c))
    nodes = [helper.make_node("Conv", ["x", "w"], ["t"]), helper.make_node(op, ["t"], ["y"], **attrs)]
    graph = helper.make_graph(nodes, "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


@needs_native
@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [2, 2]}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1], "ceil_mode": 1}),
    ("GlobalAveragePool", {}),
])
def test_pools_match_onnxruntime(op, attrs):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (the test extra)")
    import nnhal
    model = _pool_model(op, (2, 80, 17, 16), attrs)
    x = image((2, 80, 17, 16))
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run({"x": x})[0]
        kernels = {n.op: n.kernel for n in s.profile({"x": x}, runs=1).nodes}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert kernels[op] == "nhwc"
