"""The row Transpose kernel (hostkernels/op_transpose.py, "rows") against numpy, and when it is chosen."""
from __future__ import annotations

import numpy as np
import pytest

from nnhal.graph.node import Node
from nnhal.hostkernels.op_transpose import TransposeKernel, TransposeRows
from nnhal.hostkernels.select import select
from nnhal.operator.base import Info


def _node(perm) -> Node:
    return Node("t", "Transpose", ["x"], ["y"], {"perm": perm}, opset=17, version=13)


@pytest.mark.parametrize("shape, perm, dtype", [
    ((4, 3, 7, 32), [0, 2, 1, 3], np.float32),          # attention's head merge
    ((4, 7, 3, 32), [0, 2, 1, 3], np.float32),          # and split
    ((2, 3, 4, 5, 16), [3, 0, 2, 1, 4], np.float64),
    ((5, 6, 40), [1, 0, 2], np.int8),
])
def test_rows_kernel_equals_numpy(shape, perm, dtype):
    x = (np.random.default_rng(0).standard_normal(shape) * 50).astype(dtype)
    info = Info(np.dtype(dtype), shape)
    out = Info(np.dtype(dtype), tuple(shape[p] for p in perm))
    node = _node(perm)
    assert select(node, [info], [out]).name == "rows"
    run = TransposeRows().prepare(node, [info], [out])
    want = np.transpose(x, perm)
    np.testing.assert_array_equal(run([x], [None])[0], want)
    buf = np.empty(out.shape, dtype)
    assert run([x], [buf])[0] is buf and np.array_equal(buf, want)
    # a strided input takes numpy's copy
    xs = np.asfortranarray(x)
    np.testing.assert_array_equal(run([xs], [None])[0], want)


@pytest.mark.parametrize("shape, perm", [
    ((4, 3, 7, 32), [0, 1, 3, 2]),      # the last axis moves (K^T)
    ((4, 3, 7, 4), [0, 2, 1, 3]),       # rows of 16 bytes
    ((4, 3, 7, 32), [0, 1, 2, 3]),      # the identity
])
def test_reference_kernel_keeps_the_other_transposes(shape, perm):
    info = Info(np.dtype(np.float32), shape)
    out = Info(np.dtype(np.float32), tuple(shape[p] for p in perm))
    assert isinstance(select(_node(perm), [info], [out]), TransposeKernel)
