"""Mul's channel-broadcast kernel (hostkernels/op_mul.py): a map times a per-channel vector, constant or
computed at run time, either operand order, into a buffer, in place and into none."""
from __future__ import annotations

import numpy as np
import pytest

from nnhal.graph.node import Node
from nnhal.hostkernels.op_mul import ChannelMulKernel
from nnhal.hostkernels.select import select
from nnhal.operator.base import Info


def _case(shape, vec_shape, constant: bool, vec_first: bool, dtype=np.float32):
    rng = np.random.default_rng(sum(shape) + constant + 2 * vec_first)
    x = rng.standard_normal(shape).astype(dtype)
    v = rng.standard_normal(vec_shape).astype(dtype)
    vi = Info.of(v) if constant else Info(np.dtype(dtype), vec_shape)
    xi = Info(np.dtype(dtype), shape)
    ins, values = ([vi, xi], [v, x]) if vec_first else ([xi, vi], [x, v])
    node = Node("m", "Mul", ["a", "b"], ["y"], {}, opset=17, version=14)
    return node, ins, [Info(np.dtype(dtype), shape)], values


@pytest.mark.parametrize("vec_first", [False, True])
@pytest.mark.parametrize("constant", [False, True])
@pytest.mark.parametrize("shape,vec_shape", [((1, 56, 56, 96), (1, 1, 1, 96)), ((2, 64, 48, 24), (24,)),
                                             ((1, 80, 80, 37), (1, 37))])
def test_channel_mul_matches_numpy(shape, vec_shape, constant, vec_first):
    node, ins, outs, values = _case(shape, vec_shape, constant, vec_first)
    kernel = select(node, ins, outs)
    assert kernel.name == "fast"
    run = kernel.prepare(node, ins, outs)
    want = values[0] * values[1]
    y = np.full(shape, np.nan, np.float32)
    assert run(values, [y])[0] is y
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(run(values, [None])[0], want)
    full = 1 if vec_first else 0
    inplace = values[full].copy()
    args = list(values)
    args[full] = inplace
    run(args, [inplace])                                      # the planner's in-place reuse of the map
    np.testing.assert_array_equal(inplace, want)
    strided = np.repeat(values[full], 2, axis=-2)[..., ::2, :]  # not contiguous: the plain ufunc
    args[full] = strided
    np.testing.assert_array_equal(run(args, [None])[0], want)


def test_small_maps_and_other_broadcasts_keep_the_plain_ufunc():
    node, ins, outs, _ = _case((1, 7, 7, 64), (1, 1, 1, 64), False, False)
    assert select(node, ins, outs).name == "reference"                 # a run-time gate on a small map
    node, ins, outs, _ = _case((1, 64, 64, 64), (1, 64, 1, 1), True, False)
    assert ChannelMulKernel().score(node, ins, outs) == 0                # not along the last axis
    node, ins, outs, _ = _case((1, 64, 64, 64), (1, 1, 1, 64), True, False, np.float16)
    assert ChannelMulKernel().score(node, ins, outs) == 0
