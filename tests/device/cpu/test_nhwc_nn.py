"""Channels-last (NHWC) CPU kernels of pooling, BatchNormalization and LRN against the NCHW ones.

Each case builds a normalized node, selects the NHWC kernel, runs it on the transposed input and
compares the result, transposed back, with the NCHW fast kernel and the reference one.
"""
from __future__ import annotations

import numpy as np
import pytest

from nnhal.device.cpu import native
from nnhal.device.cpu.kernels import implementations, select
from nnhal.graph.node import Node
from nnhal.hostkernels.base import Kernel
from nnhal.hostkernels.fused import Activation, FusedNode
from nnhal.hostkernels.select import force_reference
from nnhal.operator.base import Info
from nnhal.operator.table import get_prototype

OPSET = 17


def make_node(op: str, ins: list[Info], attrs: dict, outputs: int = 1) -> tuple[Node, list[Info]]:
    """A node with its attribute defaults filled in, and the inferred output Infos."""
    proto = get_prototype("", op)
    node = Node(op.lower(), op, [f"in{i}" for i in range(len(ins))], [f"out{i}" for i in range(outputs)],
                dict(attrs), "", OPSET, proto.version_for(OPSET))
    proto.normalize(node)
    return node, proto.infer(node, ins)


def run_nchw(node: Node, ins: list[Info], outs: list[Info], inputs: list) -> np.ndarray:
    kernel = select(node, ins, outs)
    out = np.empty(outs[0].shape, outs[0].dtype)
    return kernel.prepare(node, ins, outs)(list(inputs), [out])[0]


def run_nhwc(node: Node, ins: list[Info], outs: list[Info], inputs: list, preallocate: bool = True,
             in_place: bool = False) -> np.ndarray:
    """The NHWC kernel on inputs[0] transposed to (N, H, W, C); the result transposed back to NCHW."""
    kernel = select(node, ins, outs, layout="NHWC")
    assert kernel.layout == "NHWC" and kernel.name.startswith("nhwc")
    run = kernel.prepare(node, ins, outs)
    x = inputs[0].transpose(0, 2, 3, 1).copy()
    n, c, oh, ow = outs[0].shape
    if in_place:
        out = x
    elif preallocate:
        out = np.full((n, oh, ow, c), np.nan, outs[0].dtype)
    else:
        out = None
    y = run([x] + list(inputs[1:]), [out])[0]
    assert y.shape == (n, oh, ow, c) and y.dtype == outs[0].dtype and y.flags.c_contiguous
    if out is not None:
        assert y is out
    return y.transpose(0, 3, 1, 2)


def check(node: Node, ins: list[Info], outs: list[Info], inputs: list, rtol: float, exact_fast: bool = False,
          **nhwc_options) -> None:
    """NHWC against the NCHW fast kernel (bit for bit when ``exact_fast``) and the reference kernel."""
    got = run_nhwc(node, ins, outs, inputs, **nhwc_options)
    fast = run_nchw(node, ins, outs, inputs)
    with force_reference():
        reference = run_nchw(node, ins, outs, inputs)
    if exact_fast:
        np.testing.assert_array_equal(got, fast)
    else:
        np.testing.assert_allclose(got, fast, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(got, reference, rtol=rtol, atol=rtol)


def nhwc_kernel(op: str) -> Kernel:
    (kernel,) = (k for k in implementations(op) if k.layout == "NHWC" and k.name == "nhwc")
    return kernel


def image(shape: tuple, dtype=np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


POOLS = {
    "3x3s2p0": {"kernel_shape": [3, 3], "strides": [2, 2]},
    "3x3s2p1": {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    "2x2s2": {"kernel_shape": [2, 2], "strides": [2, 2]},
    "3x3s2ceil": {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    "3x3s1p1": {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
    "asym": {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [0, 1, 2, 0]},
    "5x3s3p2ceil": {"kernel_shape": [5, 3], "strides": [3, 2], "pads": [2, 1, 2, 1], "ceil_mode": 1},
    "1x1s2": {"kernel_shape": [1, 1], "strides": [2, 2]},
    "same_upper": {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
}
SHAPES = [(1, 24, 13, 13), (2, 8, 14, 9)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("pool", sorted(POOLS))
def test_max_pool(pool, shape):
    x = image(shape)
    ins = [Info(x.dtype, x.shape)]
    node, outs = make_node("MaxPool", ins, POOLS[pool])
    check(node, ins, outs, [x], rtol=0, exact_fast=True)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("pool", sorted(POOLS))
def test_average_pool(pool, include_pad, shape):
    x = image(shape)
    ins = [Info(x.dtype, x.shape)]
    node, outs = make_node("AveragePool", ins, {**POOLS[pool], "count_include_pad": include_pad})
    check(node, ins, outs, [x], rtol=1e-6)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_pool_dtypes(op, dtype):
    x = image((1, 16, 11, 11), dtype)
    ins = [Info(x.dtype, x.shape)]
    node, outs = make_node(op, ins, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]})
    check(node, ins, outs, [x], rtol=1e-3 if dtype == np.float16 else 1e-12, exact_fast=op == "MaxPool",
          preallocate=False)


def test_pool_not_taken():
    x = image((1, 8, 9, 9))
    ins = [Info(x.dtype, x.shape)]
    kernel = nhwc_kernel("MaxPool")
    node, outs = make_node("MaxPool", ins, {"kernel_shape": [3, 3]}, 2)
    assert kernel.score(node, ins, outs) == 0
    # dilated windows: only the native kernel runs them (float32)
    node, outs = make_node("MaxPool", ins, {"kernel_shape": [3, 3], "dilations": [2, 2]}, 1)
    assert (kernel.score(node, ins, outs) > 0) == native.available()
    x64 = [Info(np.dtype(np.float64), x.shape)]
    node, outs = make_node("MaxPool", x64, {"kernel_shape": [3, 3], "dilations": [2, 2]}, 1)
    assert kernel.score(node, x64, outs) == 0
    node, outs = make_node("MaxPool", ins, {"kernel_shape": [3, 3]})
    assert kernel.score(node, ins, outs) > 0
    assert kernel.score(node, [Info(x.dtype, (1, 8, 9))], outs) == 0
    assert kernel.score(node, [Info(np.dtype(np.int32), x.shape)], outs) == 0


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(1, 96, 7, 7), (2, 40, 7, 7), (1, 64, 1, 1), (2, 24, 13, 5)])
def test_global_pool(op, shape):
    x = image(shape)
    ins = [Info(x.dtype, x.shape)]
    node, outs = make_node(op, ins, {})
    check(node, ins, outs, [x], rtol=1e-5, exact_fast=op == "GlobalMaxPool")
    check(node, ins, outs, [x], rtol=1e-5, exact_fast=op == "GlobalMaxPool", preallocate=False)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_global_pool_dtypes(op, dtype):
    x = image((2, 48, 7, 7), dtype)
    ins = [Info(x.dtype, x.shape)]
    node, outs = make_node(op, ins, {})
    check(node, ins, outs, [x], rtol=2e-3 if dtype == np.float16 else 1e-12)


def bn_params(c: int, dtype=np.float32) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    scale, bias, mean = (rng.standard_normal(c).astype(dtype) for _ in range(3))
    return [scale, bias, mean, rng.uniform(0.5, 2.0, c).astype(dtype)]


@pytest.mark.parametrize("shape", [(1, 48, 14, 14), (2, 3, 9, 7), (1, 1024, 5, 5)])
@pytest.mark.parametrize("constant", [True, False])
def test_batch_normalization(shape, constant):
    x = image(shape)
    params = bn_params(shape[1])
    ins = [Info(x.dtype, x.shape)] + [Info.of(p) if constant else Info(p.dtype, p.shape) for p in params]
    node, outs = make_node("BatchNormalization", ins, {"epsilon": 1e-3})
    # constant parameters take the native one-pass kernel, whose x * a + b may be one fused multiply-add (one
    # rounding fewer than numpy's): within rtol there, bit for bit for the numpy NHWC kernel
    check(node, ins, outs, [x] + params, rtol=1e-6, exact_fast=not constant)
    check(node, ins, outs, [x] + params, rtol=1e-6, exact_fast=not constant, in_place=True)


@pytest.mark.parametrize("act", [Activation("relu"), Activation("clip", np.float32(0), np.float32(6))])
def test_batch_normalization_fused_activation(act):
    x = image((1, 32, 10, 10))
    params = bn_params(32)
    ins = [Info(x.dtype, x.shape)] + [Info.of(p) for p in params]
    node, outs = make_node("BatchNormalization", ins, {})
    node = FusedNode(**vars(node), activation=act)
    assert select(node, ins, outs, layout="NHWC").fuse_activation
    got = run_nhwc(node, ins, outs, [x] + params)
    # the native one-pass kernel (constant parameters): x * a + b possibly one fused multiply-add
    np.testing.assert_allclose(got, run_nchw(node, ins, outs, [x] + params), rtol=1e-6, atol=1e-6)
    assert got.min() >= 0 and (act.kind == "relu" or got.max() <= 6)


def test_batch_normalization_not_taken():
    x = image((1, 8, 5, 5))
    params = bn_params(8)
    ins = [Info(x.dtype, x.shape)] + [Info.of(p) for p in params]
    kernel = nhwc_kernel("BatchNormalization")
    training, training_outs = make_node("BatchNormalization", ins, {"training_mode": 1}, outputs=3)
    assert kernel.score(training, ins, training_outs) == 0
    node, outs = make_node("BatchNormalization", ins, {})
    assert kernel.score(node, ins, outs) > 0
    per_activation = [ins[0]] + [Info(p.dtype, (8, 5, 5)) for p in params]
    assert kernel.score(node, per_activation, outs) == 0
    unknown = [ins[0]] + [Info(p.dtype, None) for p in params]
    assert kernel.score(node, unknown, outs) == 0


@pytest.mark.parametrize("shape", [(1, 64, 12, 12), (2, 7, 5, 6), (1, 3, 4, 4)])
@pytest.mark.parametrize("size", [5, 4, 1])
def test_lrn(shape, size):
    x = image(shape)
    ins = [Info(x.dtype, x.shape)]
    node, outs = make_node("LRN", ins, {"size": size, "alpha": 1e-2, "beta": 0.75, "bias": 1.0})
    check(node, ins, outs, [x], rtol=1e-6)
    check(node, ins, outs, [x], rtol=1e-6, in_place=True)


@pytest.mark.parametrize("beta", [0.5, 2.0])
def test_lrn_exponents(beta):
    x = image((1, 16, 6, 6), np.float64)
    ins = [Info(x.dtype, x.shape)]
    node, outs = make_node("LRN", ins, {"size": 3, "alpha": 0.1, "beta": beta, "bias": 2.0})
    check(node, ins, outs, [x], rtol=1e-12, preallocate=False)
