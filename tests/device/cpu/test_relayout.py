"""The layout pass's conversions (device/cpu/layout.py Relayout): every channel count and every float32 /
float16 pair a folded Cast makes (castfuse.py), bit for bit against numpy's transposing copy (each element is
moved and at most rounded once, so the order of the two maps cannot change a bit)."""
from __future__ import annotations

import numpy as np
import pytest

from nnhal.device.cpu.layout import TO_NCHW, TO_NHWC, Relayout
from nnhal.graph.node import Node
from nnhal.operator.base import Info


@pytest.mark.parametrize("pair", [(np.float32, np.float32), (np.float32, np.float16), (np.float16, np.float32),
                                  (np.int32, np.int32), (np.float64, np.float32)])
@pytest.mark.parametrize("perm", [TO_NHWC, TO_NCHW], ids=["to-nhwc", "to-nchw"])
@pytest.mark.parametrize("channels", [1, 3, 6, 7, 8, 12, 17, 40])
def test_a_conversion_is_numpys_transposing_copy(pair, perm, channels):
    src, dst = pair
    shape = (2, channels, 9, 13) if perm == TO_NHWC else (2, 9, 13, channels)
    out_shape = tuple(shape[p] for p in perm)
    x = (np.random.default_rng(channels).standard_normal(shape) * 300).astype(src)
    node = Node("r", "Transpose", ["x"], ["y"], {"perm": list(perm)}, opset=21, version=21)
    run = Relayout(perm).prepare(node, [Info(np.dtype(src), shape)], [Info(np.dtype(dst), out_shape)])
    want = x.transpose(perm).astype(dst)
    y = np.full(out_shape, 5, dst)
    (got,) = run([x], [y])
    assert got is y
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype
    (got,) = run([x], [None])
    np.testing.assert_array_equal(got, want)
