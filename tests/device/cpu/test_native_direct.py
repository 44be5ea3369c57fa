"""The native direct convolution (kernels.c nn_direct_nhwc_f32, device/cpu/native/direct_conv.py) on the cpu device
against a float64 reference: few output channels (the stem, narrow necks and heads), channel counts that are
not multiples of 16 or 8, kernel sizes 1 to 7, strides, dilations, asymmetric padding, bias, a fused Relu,
and the left and right edge pixels of rows narrower than one register tile."""
from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import native
from nnhal.device.cpu.native import direct_conv

pytestmark = pytest.mark.skipif(not native.available(), reason="the native kernels are not built here "
                                                               "(no C compiler at install, or NNHAL_NATIVE=0)")


def _model(x_shape, wt, bias, k, stride, dil, pads, relu, channels_last=True):
    inits = [numpy_helper.from_array(wt, "w")]
    ins = ["x", "w"]
    if bias is not None:
        inits.append(numpy_helper.from_array(bias, "b"))
        ins.append("b")
    nodes = [helper.make_node("Conv", ins, ["c"], kernel_shape=[k, k], strides=[stride, stride],
                              dilations=[dil, dil], pads=pads)]
    last = "c"
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
        last = "r"
    # a 1x1 max pool after it: the convolution's output stays channels last (the cpu layout pass), so the
    # channels-last kernels run it; without it the lone convolution stays channels first (op_conv.ConvGemm)
    nodes.append(helper.make_node("MaxPool" if channels_last else "Identity", [last], ["y"],
                                  **({"kernel_shape": [1, 1]} if channels_last else {})))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _reference(x, wt, bias, stride, dil, pads, relu):
    """The convolution in float64, and the sum of |products| of each output (the rounding bound's scale)."""
    top, left, bottom, right = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    m, c, kh, kw = wt.shape
    win = sliding_window_view(xp, ((kh - 1) * dil + 1, (kw - 1) * dil + 1), axis=(2, 3))
    win = win[:, :, ::stride, ::stride, ::dil, ::dil]                      # (n, c, oh, ow, kh, kw)
    y = np.einsum("nchwij,mcij->nmhw", win, wt.astype(np.float64))
    scale = np.einsum("nchwij,mcij->nmhw", np.abs(win), np.abs(wt.astype(np.float64)))
    if bias is not None:
        y += bias.reshape(1, -1, 1, 1)
        scale += np.abs(bias).reshape(1, -1, 1, 1)
    return (np.maximum(y, 0) if relu else y), scale


CASES = [  # c, m, h, w, k, stride, dil, pads
    (3, 16, 23, 29, 7, 2, 1, [3, 3, 3, 3]),       # a stem
    (3, 20, 17, 13, 3, 2, 1, [1, 1, 1, 1]),       # m not a multiple of 16: a last block of 8 then 4
    (16, 16, 12, 14, 3, 1, 1, [1, 1, 1, 1]),
    (32, 40, 9, 8, 3, 2, 1, [0, 1, 2, 0]),        # asymmetric pads
    (5, 12, 11, 10, 5, 1, 2, [4, 2, 1, 3]),       # dilation 2: the tap-by-tap loop
    (8, 8, 7, 5, 1, 1, 1, [0, 0, 0, 0]),          # 1x1
    (24, 7, 6, 4, 3, 1, 1, [1, 1, 1, 1]),         # m below 8, rows narrower than a tile
    (48, 48, 10, 19, 3, 1, 1, [1, 1, 1, 1]),
    (40, 24, 7, 7, 3, 1, 1, [1, 1, 1, 1]),        # a 7-wide map: edge pixels of two rows (and images) share a tile
    (24, 16, 14, 14, 3, 2, 1, [1, 1, 1, 1]),      # one left-edge pixel between a row's inside tiles
    (32, 48, 13, 13, 5, 1, 1, [2, 2, 2, 2]),      # two edge pixels a side, a 5x5 tap table
    (4, 16, 12, 12, 9, 1, 1, [4, 4, 4, 4]),       # 81 taps: more than a tap table holds, edge pixels one at a time
    (8, 16, 5, 40, 3, 1, 1, [1, 1, 1, 1]),        # rows of 40 pixels: the row walk
]


@pytest.mark.parametrize("c,m,h,w,k,stride,dil,pads", CASES)
@pytest.mark.parametrize("threads", [1, 2])
def test_direct_conv_matches_reference(monkeypatch, c, m, h, w, k, stride, dil, pads, threads):
    _check(monkeypatch, c, m, h, w, k, stride, dil, pads, threads, True)


# every case's map is small (at most 256 output pixels): fewer than 16 output channels run direct too (nchw_fits)
@pytest.mark.parametrize("c,m,h,w,k,stride,dil,pads", [case for case in CASES if case[4] > 1])
def test_direct_conv_channels_first_matches_reference(monkeypatch, c, m, h, w, k, stride, dil, pads):
    _check(monkeypatch, c, m, h, w, k, stride, dil, pads, 2, False)


def _check(monkeypatch, c, m, h, w, k, stride, dil, pads, threads, channels_last):
    calls = []
    real = native.Conv
    monkeypatch.setattr(native, "Conv", lambda kind, *a: (calls.append(kind), real(kind, *a))[1])
    rng = np.random.default_rng(c * 31 + m + k)
    wt = rng.standard_normal((m, c, k, k)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32) if m % 2 == 0 else None
    relu = stride == 1
    x = rng.standard_normal((2, c, h, w)).astype(np.float32)
    assert direct_conv.direct_fits(2, c, m, (k, k), 1, np.dtype(np.float32))
    want, scale = _reference(x, wt, bias, stride, dil, pads, relu)
    with nnhal.Session(_model(x.shape, wt, bias, k, stride, dil, pads, relu, channels_last), devices=["cpu"],
                       num_thread=threads) as s:
        got = s.run({"x": x})[0]
    assert "direct" in calls, "the native direct kernel was not prepared"
    # float32 sums of c * k * k products in any order: each term's rounding is at most 2^-24 relative per add
    bound = (c * k * k + 2) * 2.0 ** -24 * scale + 1e-30
    assert got.shape == want.shape
    assert np.all(np.abs(got - want) <= bound)


def test_direct_fits_only_float32_group1_narrow():
    f32 = np.dtype(np.float32)
    assert direct_conv.direct_fits(1, 64, 16, (3, 3), 1, f32)
    assert direct_conv.direct_fits(1, 3, 32, (7, 7), 1, f32)           # few taps: a stem's columns
    assert not direct_conv.direct_fits(1, 128, 128, (3, 3), 1, f32)    # GEMM territory
    assert not direct_conv.direct_fits(1, 16, 16, (3, 3), 2, f32)
    assert not direct_conv.direct_fits(1, 16, 16, (3, 3), 1, np.dtype(np.float64))
    assert direct_conv.nchw_fits(1, 48, 48, (3, 3), 1, f32)
    assert not direct_conv.nchw_fits(1, 32, 32, (1, 1), 1, f32)        # one GEMM on the input already
    assert not direct_conv.nchw_fits(1, 48, 10, (3, 3), 1, f32)        # 10 of 16 lanes
    assert not direct_conv.nchw_fits(1, 48, 10, (3, 3), 1, f32, 32 * 32)
    assert direct_conv.nchw_fits(1, 48, 10, (3, 3), 1, f32, 16 * 16)   # a small map: numpy's calls cost more


def test_direct_fits_small_maps_without_avx512(monkeypatch):
    f32 = np.dtype(np.float32)
    monkeypatch.setattr(direct_conv.parallel, "avx512", lambda: False)
    assert direct_conv.direct_fits(1, 128, 128, (3, 3), 1, f32, 7 * 7)         # a 7x7 map: the GEMM's rows are few
    assert direct_conv.direct_fits(1, 64, 128, (3, 3), 1, f32, 10 * 10)       # yolo_c2f's stride-2 conv to 10x10
    assert not direct_conv.direct_fits(1, 128, 128, (3, 3), 1, f32, 11 * 11)
    assert not direct_conv.direct_fits(1, 128, 128, (3, 3), 1, f32, 14 * 14)
    # a 1x1 on a small map: its BLAS call packs the weights each call; while they stay small
    assert direct_conv.direct_fits(1, 256, 128, (1, 1), 1, f32, 7 * 7)
    assert direct_conv.direct_fits(1, 192, 128, (1, 1), 1, f32, 10 * 10)
    assert not direct_conv.direct_fits(1, 512, 256, (1, 1), 1, f32, 7 * 7)     # deep: the GEMM's packing pays
    assert not direct_conv.direct_fits(1, 256, 128, (1, 1), 1, f32, 14 * 14)
    assert not direct_conv.direct_fits(1, 256, 128, (1, 1), 1, f32)             # pixels not known: the channel rules
    monkeypatch.setattr(direct_conv.parallel, "avx512", lambda: True)
    assert not direct_conv.direct_fits(1, 128, 128, (3, 3), 1, f32, 7 * 7)     # twice the GEMM's vector width there
    assert not direct_conv.direct_fits(1, 256, 128, (1, 1), 1, f32, 7 * 7)


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_direct_conv_forced_on_every_group1_case(monkeypatch, layout):
    """NNHAL_DIRECT=2 puts every group-1 float32 non-Winograd case of the kernel tests on the direct kernel (dilations,
    pads, strides, batches, activations), channels last and through channels-first copies."""
    from tests.device.cpu import test_nchw_conv, test_nhwc_conv

    monkeypatch.setenv("NNHAL_DIRECT", "2")
    calls = []
    real = native.Conv
    monkeypatch.setattr(native, "Conv", lambda kind, *a: (calls.append(kind), real(kind, *a))[1])
    # Winograd keeps 48 channels and more (direct_conv.WINOGRAD_MIN_CHANNELS)
    names = [name for name, case in test_nhwc_conv.CASES.items() if case[9] == 1 and "winograd" not in case[10]]
    if layout == "nchw":        # channels first: 1x1 and fewer than 16 output channels keep the GEMM
        names = [name for name in names if test_nhwc_conv.CASES[name][5] != (1, 1)
                 and test_nhwc_conv.CASES[name][4] >= 16]
    check = test_nhwc_conv.check if layout == "nhwc" else test_nchw_conv.check_nchw
    for name in names:
        calls.clear()
        for act in ("relu", "clip"):
            check(name, True, test_nhwc_conv.ACTIVATIONS[act])
        assert calls.count("direct") == 2, name


def _small_map_run(monkeypatch, c, m, k, h, stride, pads, seed):
    """A c -> m KxK convolution with bias and Relu over a (2, c, h, h) input on the cpu device at 2 threads: the
    native.Conv kinds prepared, the output, the float64 reference and its rounding scale."""
    calls = []
    real = native.Conv
    monkeypatch.setattr(native, "Conv", lambda kind, *a: (calls.append(kind), real(kind, *a))[1])
    rng = np.random.default_rng(seed)
    wt = rng.standard_normal((m, c, k, k)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    x = rng.standard_normal((2, c, h, h)).astype(np.float32)
    want, scale = _reference(x, wt, bias, stride, 1, pads, True)
    with nnhal.Session(_model(x.shape, wt, bias, k, stride, 1, pads, True), devices=["cpu"], num_thread=2) as s:
        got = s.run({"x": x})[0]
    return calls, got, want, scale


@pytest.mark.skipif(direct_conv.parallel.avx512(), reason="with AVX-512 small maps keep the GEMM (direct_fits)")
@pytest.mark.parametrize("check", ["0", "1"])
def test_small_map_wide_conv_runs_direct(monkeypatch, check):
    """96 -> 80 channels 3x3 on a 6x6 map (batch 2, both plan paths): the small-map rule puts it on the direct
    kernel, whose tiles then hold pixels of several rows and of both images."""
    monkeypatch.setenv("NNHAL_CHECK", check)
    calls, got, want, scale = _small_map_run(monkeypatch, 96, 80, 3, 6, 1, [1, 1, 1, 1], 5)
    assert "direct" in calls, "the small-map convolution did not run on the direct kernel"
    assert np.all(np.abs(got - want) <= (96 * 9 + 2) * 2.0 ** -24 * scale + 1e-30)


@pytest.mark.skipif(direct_conv.parallel.avx512(), reason="with AVX-512 small maps keep the GEMM (direct_fits)")
@pytest.mark.parametrize("stride, h", [(1, 7), (2, 13), (2, 20)])
def test_small_map_deep_1x1_runs_direct(monkeypatch, stride, h):
    """A 1x1 of 200 -> 120 channels (not multiples of 16) onto a map of at most 100 pixels, batch 2, stride 1 and 2
    (read in place, no gather copy): the small-map rule puts it on the direct kernel; the float64 reference bounds
    its rounding (K = 200 products and the bias)."""
    calls, got, want, scale = _small_map_run(monkeypatch, 200, 120, 1, h, stride, [0, 0, 0, 0], 7)
    assert calls == ["direct"], calls
    assert got.shape == want.shape
    assert np.all(np.abs(got - want) <= (200 + 2) * 2.0 ** -24 * scale + 1e-30)


@pytest.mark.parametrize("parts", [1, 2, 3, 7])
def test_direct_conv_split_by_pixels(parts):
    """The kernel's parts are ranges of output pixels (nn_direct_task), cut mid-row and mid-tile: any count of
    parts gives the reference (7x9 maps of a batch of 2, 40 -> 24 channels, a fused Relu)."""
    import types

    c, m, h, w = 40, 24, 7, 9
    rng = np.random.default_rng(parts)
    wt = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    x = rng.standard_normal((2, c, h, w)).astype(np.float32)
    s = types.SimpleNamespace(n=2, h=h, w=w, c=c, m=m, oh=h, ow=w, kernel=(3, 3), strides=(1, 1),
                              dilations=(1, 1), pads=(1, 1, 1, 1))
    conv = direct_conv.make(s, wt, bias, native.make_act("relu"))
    y = np.empty((2, h, w, m), np.float32)
    conv.run(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), y, None, parts)
    want, scale = _reference(x, wt, bias, 1, 1, [1, 1, 1, 1], True)
    bound = (c * 9 + 2) * 2.0 ** -24 * scale + 1e-30
    assert np.all(np.abs(y.transpose(0, 3, 1, 2) - want) <= bound)
