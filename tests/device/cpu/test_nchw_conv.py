"""The NCHW fast convolution kernels (op_conv.ConvGemm: 1x1, depthwise, output-side shifts, im2col bands;
op_conv.ConvWinograd) against the reference im2col kernel, with bias and fused activations, into a
preallocated output and into none, and in bands of rows under small scratch bounds."""
from __future__ import annotations

import numpy as np
import pytest

from nnhal.device.cpu.kernels import conv as op_conv
from nnhal.device.cpu.kernels import select
from nnhal.hostkernels._conv2d import conv2d
from tests.device.cpu.test_nhwc_conv import ACTIVATIONS, CASES, make, reference

# id: (N, C, H, W, M, kernel, strides, pads, dilations, group): shapes that reach the output-side shifts
SHIFT_CASES = {
    "shift-p1": (1, 16, 40, 40, 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, "gemm"),
    "shift-nopad-b2": (2, 16, 36, 33, 16, (3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 1, "gemm"),
}
ALL = {**CASES, **SHIFT_CASES}


def strategy(name: str) -> str:
    node, ins, outs, *_ = make(name, True, None)
    s = conv2d(node, ins, outs)
    if select(node, ins, outs).name == "winograd":
        return "winograd"
    if s.kernel == (1, 1) and not s.padded:
        return "1x1"
    if s.cg == 1 and s.mg == 1:
        return "depthwise"
    return "shift" if op_conv.shift_fits(s) else "im2col"


def check_nchw(name: str, bias: bool, act, dtype=np.float32, tol: float = 1e-4) -> None:
    node, ins, outs, x, wv, bv = make(name, bias, act, dtype)
    kernel = select(node, ins, outs)
    assert kernel.layout is None and kernel.name in ("gemm", "winograd")
    run = kernel.prepare(node, ins, outs)
    expect = reference(node, ins, outs, x, wv, bv)
    y = np.full(outs[0].shape, np.nan, dtype)
    (got,) = run([x, wv, bv], [y])
    assert got is y
    scale = float(np.abs(expect).max()) or 1.0
    np.testing.assert_allclose(y, expect, rtol=tol, atol=tol * scale)
    (fresh,) = run([x, wv, bv], [None])
    np.testing.assert_array_equal(fresh, y)        # bit equality: the same prepared kernel on the same inputs


@pytest.fixture(autouse=True)
def _cases(monkeypatch):
    monkeypatch.setattr("tests.device.cpu.test_nhwc_conv.CASES", ALL)


def test_every_strategy_is_covered():
    assert {strategy(name) for name in ALL} == {"1x1", "depthwise", "shift", "im2col", "winograd"}


@pytest.mark.parametrize("act", list(ACTIVATIONS))
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("name", list(ALL))
def test_nchw_conv_matches_reference(name, bias, act):
    check_nchw(name, bias, ACTIVATIONS[act])


@pytest.mark.parametrize("budget", [1, 20000], ids=["row-by-row", "few-rows"])
@pytest.mark.parametrize("name", ["3x3-p1", "7x7-s2-p3", "g4-s2", "winograd-28", "winograd-30"])
def test_nchw_conv_bands_of_rows(monkeypatch, name, budget):
    monkeypatch.setenv("NNHAL_DIRECT", "0")            # the direct kernel has no bands
    for bound in ("BAND_BYTES", "WINOGRAD_BAND_BYTES"):
        monkeypatch.setattr(op_conv, bound, budget)
    check_nchw(name, True, ACTIVATIONS["clip"])


@pytest.mark.parametrize("name", ["shift-p1", "dw3x3-s2", "winograd-30", "1x1-g4"])
def test_nchw_conv_float64(name):
    check_nchw(name, True, None, np.float64, 1e-10)
