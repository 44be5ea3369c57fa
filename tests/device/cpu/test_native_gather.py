"""The native last-axis Gather (kernels.c nn_gather_last_b32) against np.take, and when it is chosen."""
from __future__ import annotations

import numpy as np
import pytest

from nnhal.device.cpu import native
from nnhal.device.cpu.kernels import select
from nnhal.device.cpu.kernels.gather import GatherIndices, GatherLastAxis
from nnhal.operator.base import Info
from tests.device.cpu.test_nhwc_nn import make_node

needs_native = pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.status().reason}")


def _gather(data: np.ndarray, idx: np.ndarray, axis: int = -1):
    ins = [Info(data.dtype, data.shape), Info(idx.dtype, idx.shape, idx)]
    node, outs = make_node("Gather", ins, {"axis": axis})
    return node, ins, outs


@needs_native
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint32])
@pytest.mark.parametrize("idx", [
    np.arange(240).reshape(3, 80).T.reshape(-1),        # ShuffleNet's channel shuffle, 3 groups (transposed)
    np.arange(240).reshape(8, 30).T.reshape(-1),        # 8 groups
    np.arange(240).reshape(48, 5).T.reshape(-1),        # 48 groups: the general transpose loop
    np.arange(240).reshape(3, 80).T.reshape(-1)[::-1],  # not a shuffle: gathers
    np.array([5, -1, 0, 5, -240, 17], np.int64),          # negative, repeated, a subset
    np.array([239]),
])
def test_gather_last_equals_take(dtype, idx):
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((2, 7, 5, 240)) * 100).astype(dtype)
    if dtype == np.float32:
        bits = data.view(np.uint32).reshape(-1)
        bits[::13] = 0x7FC00001                              # NaNs with a payload: copied bit for bit
    node, ins, outs = _gather(data, idx)
    kernel = select(node, ins, outs)
    assert isinstance(kernel, GatherLastAxis)
    out = np.empty(outs[0].shape, dtype)
    got = kernel.prepare(node, ins, outs)([data, idx], [out])[0]
    want = np.take(data, np.where(idx < 0, idx + 240, idx), axis=-1)
    assert got is out
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@needs_native
def test_gather_last_rows_compose():
    data = np.random.default_rng(1).standard_normal((9, 40)).astype(np.float32)
    idx = np.ascontiguousarray(np.arange(40)[::-1], dtype=np.int32)
    out = np.full((9, 40), np.nan, np.float32)
    for r0, r1 in [(0, 4), (4, 5), (5, 9)]:
        native.gather_last(data, out, idx, r0, r1)
    np.testing.assert_array_equal(out, data[:, ::-1])


# the identity is the shuffle of ``dim`` groups of one channel (a transpose of (dim, 1)): also right
@pytest.mark.parametrize("groups,dim,want", [(3, 240, 3), (2, 8, 2), (4, 8, 4), (1, 8, 8)])
def test_shuffle_groups_recognised(groups, dim, want):
    from nnhal.device.cpu.kernels.gather import _shuffle_groups
    idx = np.arange(dim).reshape(groups, dim // groups).T.reshape(-1).astype(np.int32)
    assert _shuffle_groups(idx, dim) == want
    assert _shuffle_groups(idx[:-1], dim) == 0
    swapped = idx.copy()
    swapped[[2, 5]] = swapped[[5, 2]]
    assert _shuffle_groups(swapped, dim) == 0


def test_gather_last_not_taken():
    """Other axes, indices known only at run time, 8-byte data and out-of-range indices keep np.take (whose
    error names the bad index): run-time indices that of GatherIndices, which checks their range per run."""
    data = np.zeros((2, 3, 8), np.float32)
    idx = np.array([0, 7])
    for node, ins, outs in [_gather(data, idx, axis=1), _gather(data.astype(np.float64), idx),
                            _gather(data, np.array([0, 8]))]:
        assert not isinstance(select(node, ins, outs), GatherLastAxis)
    node, ins, outs = _gather(data, idx)
    ins[1] = Info(idx.dtype, idx.shape)
    assert isinstance(select(node, ins, outs), GatherIndices)
