"""The channels-last (NHWC) Conv kernels against the NCHW reference kernel."""
from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import pytest

from nnhal.device.cpu.kernels import _conv_nhwc, implementations, select
from nnhal.graph.node import Node
from nnhal.hostkernels import _conv2d
from nnhal.hostkernels.fused import Activation, FusedNode, activation_of
from nnhal.hostkernels.select import force_reference
from nnhal.operator.base import Info
from nnhal.operator.table import get_prototype

# id: (N, C, H, W, M, kernel, strides, pads [top, left, bottom, right], dilations, group, expected kernel)
CASES = {
    "1x1": (2, 16, 9, 11, 24, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, "nhwc-gemm"),
    "1x1-s2": (1, 16, 9, 11, 24, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 1, "nhwc-gemm"),
    "1x1-g4": (1, 16, 6, 5, 8, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 4, "nhwc-gemm"),
    "3x3-p1": (2, 8, 10, 12, 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, "nhwc-gemm"),
    "3x3-p1-s2": (1, 8, 11, 10, 16, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1, "nhwc-gemm"),
    "7x7-s2-p3": (1, 3, 32, 30, 16, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1, "nhwc-gemm"),
    "asym-pads": (1, 6, 9, 8, 10, (3, 2), (1, 2), (0, 2, 1, 1), (1, 1), 1, "nhwc-gemm"),
    "dilation2": (1, 6, 13, 12, 10, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 1, "nhwc-gemm"),
    "dw3x3": (2, 12, 10, 9, 12, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 12, "nhwc-gemm"),
    "dw3x3-s2": (1, 12, 11, 10, 12, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 12, "nhwc-gemm"),
    "dw3x3-dil2-nopad": (1, 8, 11, 10, 8, (3, 3), (1, 1), (0, 0, 0, 0), (2, 2), 8, "nhwc-gemm"),
    "dw1x1-mult2-s2": (1, 8, 7, 8, 16, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 8, "nhwc-gemm"),
    "dw-mult2": (2, 6, 9, 9, 12, (3, 3), (1, 2), (1, 0, 1, 2), (1, 1), 6, "nhwc-gemm"),
    "g3": (1, 12, 8, 9, 18, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 3, "nhwc-gemm"),
    "g4-s2": (2, 16, 9, 9, 8, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 4, "nhwc-gemm"),
    "g16-supergroups": (1, 64, 8, 9, 32, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 16, "nhwc-gemm"),
    "g2-wide-groups": (2, 64, 7, 6, 64, (3, 3), (2, 1), (1, 0, 1, 2), (1, 2), 2, "nhwc-gemm"),
    # RegNetY's 8-channel groups: super-groups of 1 (13 groups) and 3 (6 groups, stride 2)
    "g13-regnet": (1, 104, 6, 7, 104, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 13, "nhwc-gemm"),
    "g6-regnet-s2": (1, 48, 9, 8, 48, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 6, "nhwc-gemm"),
    "shift-xcorr": (1, 128, 13, 12, 1, (5, 4), (1, 1), (0, 0, 0, 0), (1, 1), 1, "nhwc-gemm"),
    "shift-padded-dilated": (2, 256, 9, 10, 3, (3, 3), (1, 1), (1, 2, 2, 1), (2, 1), 1, "nhwc-gemm"),
    "winograd-28": (1, 64, 28, 28, 64, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, "nhwc-winograd"),
    "winograd-30": (2, 64, 30, 30, 64, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, "nhwc-winograd"),
    "winograd-nopad": (1, 64, 27, 29, 64, (3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 1, "nhwc-winograd"),
    # below a 12x12 output the Winograd tiles' padding loses (_conv_nhwc.WINOGRAD_MIN_OUT); from 12x12 it wins
    "3x3-64-small-map": (1, 64, 10, 10, 64, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, "nhwc-gemm"),
    "winograd-14-odd-channels": (1, 67, 14, 13, 53, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, "nhwc-winograd"),
}
ACTIVATIONS = {"none": None, "relu": Activation("relu"),
               "clip": Activation("clip", np.asarray(-0.5, np.float32), np.asarray(0.5, np.float32)),
               "hardswish": Activation("hardswish"), "silu": Activation("silu"), "tanh": Activation("tanh")}


def make(name: str, bias: bool, act: Activation | None, dtype=np.float32):
    """The Conv node (default attributes filled by the prototype, the activation fused), its input and
    output infos, the input and the constant weights and bias."""
    n, c, h, w, m, kernel, strides, pads, dilations, group, _ = CASES[name]
    rng = np.random.default_rng(zlib.crc32(f"{name} {bias} {act and act.kind}".encode()))
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wv = (rng.standard_normal((m, c // group, *kernel)) / np.sqrt(c // group * kernel[0] * kernel[1])).astype(dtype)
    bv = rng.standard_normal(m).astype(dtype) if bias else None
    node = Node("conv", "Conv", ["x", "w", "b" if bias else ""], ["y"],
                {"kernel_shape": list(kernel), "strides": list(strides), "pads": list(pads),
                 "dilations": list(dilations), "group": group}, opset=17, version=11)
    proto = get_prototype("", "Conv")
    proto.normalize(node)
    ins = [Info(x.dtype, x.shape), Info.of(wv), Info.of(bv) if bias else None]
    outs = proto.infer(node, ins)
    if act is not None:
        node = FusedNode(**vars(node), activation=act)
    return node, ins, outs, x, wv, bv


def reference(node, ins, outs, x, wv, bv) -> np.ndarray:
    """The NCHW reference kernel (without the fused activation) followed by the activation."""
    plain = Node(**{f.name: getattr(node, f.name) for f in dataclasses.fields(Node)})
    with force_reference():
        kernel = select(plain, ins, outs)
    assert kernel.name == "reference"
    (y,) = kernel.prepare(plain, ins, outs)([x, wv, bv], [None])
    act = activation_of(node)
    if act is not None:
        y = {"relu": lambda: np.maximum(y, 0), "clip": lambda: np.clip(y, act.lo, act.hi),
             "hardswish": lambda: y * np.clip(y / 6 + 0.5, 0, 1), "silu": lambda: y / (1 + np.exp(-y)),
             "tanh": lambda: np.tanh(y)}[act.kind]()
    return y


def check(name: str, bias: bool, act: Activation | None, dtype=np.float32, tol: float = 1e-4) -> None:
    """The selected NHWC kernel, into a preallocated output and into none, against the reference."""
    node, ins, outs, x, wv, bv = make(name, bias, act, dtype)
    kernel = select(node, ins, outs, layout="NHWC")
    assert kernel.layout == "NHWC" and kernel.name == CASES[name][-1]
    run = kernel.prepare(node, ins, outs)
    expect = reference(node, ins, outs, x, wv, bv)
    n, m, oh, ow = outs[0].shape
    xt = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    y = np.full((n, oh, ow, m), np.nan, dtype)
    (got,) = run([xt, wv, bv], [y])
    assert got is y
    scale = float(np.abs(expect).max()) or 1.0
    np.testing.assert_allclose(y.transpose(0, 3, 1, 2), expect, rtol=tol, atol=tol * scale)
    (fresh,) = run([xt, wv, bv], [None])
    assert fresh.shape == (n, oh, ow, m) and fresh.dtype == dtype and fresh.flags.c_contiguous
    np.testing.assert_array_equal(fresh, y)        # bit equality: the same prepared kernel on the same inputs


@pytest.mark.parametrize("act", list(ACTIVATIONS))
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("name", list(CASES))
def test_nhwc_conv_matches_reference(name, bias, act):
    check(name, bias, ACTIVATIONS[act])


@pytest.mark.parametrize("name", ["3x3-p1-s2", "dw-mult2", "g16-supergroups", "winograd-30"])
def test_nhwc_conv_float64(name):
    check(name, True, None, np.float64, 1e-10)


@pytest.mark.parametrize("budget", [1, 20000], ids=["row-by-row", "few-rows"])
@pytest.mark.parametrize("name", ["3x3-p1", "7x7-s2-p3", "dilation2", "dw3x3", "dw-mult2", "g4-s2",
                                  "g16-supergroups", "winograd-30", "winograd-nopad"])
def test_nhwc_conv_bands_of_rows(monkeypatch, name, budget):
    """Scratch budgets below one image: bands of output rows within each image (the direct kernel off: it
    has no bands)."""
    monkeypatch.setenv("NNHAL_DIRECT", "0")
    for bound in ("BAND_BYTES", "DEPTHWISE_BAND_BYTES", "WINOGRAD_BAND_BYTES"):
        monkeypatch.setattr(_conv_nhwc, bound, budget)
    check(name, True, ACTIVATIONS["relu"])


def test_nhwc_conv_paths():
    """Few output channels over a deep window (the shift-* cases) take the output-side shifts, no other case."""
    for name in CASES:
        node, ins, outs, *_ = make(name, False, None)
        assert (_conv_nhwc.ConvGemmNHWC.path(_conv2d.conv2d(node, ins, outs)) == "shift") == name.startswith("shift")


def test_nhwc_conv_scores():
    node, ins, outs, x, wv, bv = make("winograd-28", True, None)
    nhwc = {k.name: k for k in implementations("Conv") if k.layout == "NHWC"}
    assert set(nhwc) == {"nhwc-gemm", "nhwc-winograd", "nhwc-dynamic"}
    assert nhwc["nhwc-winograd"].score(node, ins, outs) > nhwc["nhwc-gemm"].score(node, ins, outs) > 0
    assert nhwc["nhwc-dynamic"].score(node, ins, outs) == 0
    # weights known only at run time: only the dynamic-weight kernel runs it (test_dynamic_conv.py)
    runtime_w = [ins[0], Info(wv.dtype, wv.shape), ins[2]]
    assert [k.name for k in nhwc.values() if k.score(node, runtime_w, outs) > 0] == ["nhwc-dynamic"]
    # a 3-D (1-D convolution) input: neither runs it
    node1 = dataclasses.replace(node, attrs={**node.attrs, "kernel_shape": [3], "strides": [1], "pads": [1, 1],
                                             "dilations": [1]})
    ins1 = [Info(np.dtype(np.float32), (1, 64, 28)), Info.of(wv[..., 0]), ins[2]]
    outs1 = get_prototype("", "Conv").infer(node1, ins1)
    assert all(k.score(node1, ins1, outs1) == 0 for k in nhwc.values())


@pytest.mark.parametrize("act", ["none", "relu", "hardswish"])
@pytest.mark.parametrize("name,path", [("1x1", "1x1"), ("3x3-p1", "direct"), ("7x7-s2-p3", "direct")])
def test_nhwc_conv_planned_output_once(monkeypatch, name, path, act):
    """The pointwise path's prepared native GEMM (bias and activation in its epilogue) and the direct kernel check
    the planned output once: after the first run on an output buffer no pixel_rows call; a channel slice of a
    wider tensor is written in place (its other channels untouched); a strided input takes the general path;
    all agree with the reference. (The direct kernel off for "1x1": it takes pointwise convolutions of few
    channels.)"""
    if path == "1x1":
        monkeypatch.setenv("NNHAL_DIRECT", "0")
    calls = []
    real = _conv_nhwc.pixel_rows
    monkeypatch.setattr(_conv_nhwc, "pixel_rows", lambda *a: calls.append(1) or real(*a))
    node, ins, outs, x, wv, bv = make(name, True, ACTIVATIONS[act])
    assert _conv_nhwc.ConvGemmNHWC.path(_conv2d.conv2d(node, ins, outs)) == path
    run = select(node, ins, outs, layout="NHWC").prepare(node, ins, outs)
    expect = reference(node, ins, outs, x, wv, bv).transpose(0, 2, 3, 1)
    tol = 1e-4 * (float(np.abs(expect).max()) or 1.0)
    xt = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    y = np.full(expect.shape, np.nan, np.float32)
    for k in (3, 1, 2):
        # new inputs into the same output: each run's own result
        want = reference(node, ins, outs, x * np.float32(k), wv, bv).transpose(0, 2, 3, 1)
        (got,) = run([xt * np.float32(k), wv, bv], [y])
        assert got is y
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=tol * k)
    assert len(calls) == 1                     # the planned output's pixel rows, once
    wide = np.full(expect.shape[:3] + (expect.shape[3] + 5,), np.nan, np.float32)
    (got,) = run([xt, wv, bv], [wide[..., 2:-3]])
    np.testing.assert_allclose(wide[..., 2:-3], expect, rtol=1e-4, atol=tol)
    assert np.isnan(wide[..., :2]).all() and np.isnan(wide[..., -3:]).all()
    strided = np.repeat(xt, 2, axis=-1)[..., ::2]
    (got,) = run([strided, wv, bv], [np.empty_like(y)])
    np.testing.assert_allclose(got, expect, rtol=1e-4, atol=tol)
