"""The Resize that writes NCHW with fp16 storage's rounding folded in (kernels/resize.py ResizeToNCHW.rounding,
native/nn_resize_nchw.h: F16C 8 lanes at a time, the rest of each row one by one): bit-equal to the plain kernel's
output rounded through float16, on row widths that are and are not multiples of 8, past float16's range too."""
from __future__ import annotations

import numpy as np
import pytest

from nnhal.device.cpu import native
from nnhal.device.cpu.kernels.resize import ResizeToNCHW
from nnhal.graph.node import Node
from nnhal.operator.base import Info
from nnhal.operator.table import get_prototype


@pytest.mark.skipif(not native.available(), reason=f"native kernels not loaded: {native.status().reason}")
@pytest.mark.parametrize("shape,scale", [((1, 5, 6, 4), 2.0), ((2, 3, 7, 9), 4.0), ((1, 8, 32, 32), 8.0),
                                         ((1, 2, 5, 5), 3.4)])
def test_the_rounded_resize_is_the_plain_one_rounded(shape, scale):
    n, h, w, c = shape                                        # the NHWC input
    x = (np.random.default_rng(c * 7 + h).standard_normal(shape) * 3000).astype(np.float32)
    x.flat[:4] = [70000.0, -1e-8, np.inf, 66000.0]
    scales = np.array([1, 1, scale, scale], np.float32)
    node = Node("r", "Resize", ["x", "", "s"], ["y"], {"mode": "linear"}, opset=18, version=18)
    get_prototype("", "Resize").normalize(node)
    ins = [Info(np.dtype(np.float32), (n, c, h, w)), None, Info(np.dtype(np.float32), (4,), scales)]
    outs = get_prototype("", "Resize").infer(node, ins)
    plain = ResizeToNCHW().prepare(node, ins, outs)
    rounded = ResizeToNCHW().rounding().prepare(node, ins, outs)
    (want,) = plain([x, None, scales], [np.empty(outs[0].shape, np.float32)])
    with np.errstate(over="ignore", invalid="ignore"):
        want = want.astype(np.float16).astype(np.float32)
    (got,) = rounded([x, None, scales], [np.empty(outs[0].shape, np.float32)])
    np.testing.assert_array_equal(got, want)
