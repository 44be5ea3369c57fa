"""The native Winograd F(4x4, 3x3) transforms (kernels.c winograd_input / winograd_output, native/nn_winograd.h)
behind the channels-last Winograd kernel (kernels/_conv_nhwc.py ConvWinogradNHWC) against a float64 reference, with
a bound derived from the transforms' error growth: odd and non-multiple-of-4 maps (cropped edge tiles), channel
counts that are not multiples of 8 (or of the transforms' 64-channel steps), no, symmetric and asymmetric padding,
batches, bias, fused activations, bands of tile rows, and outputs that are a channel slice of a wider tensor."""
from __future__ import annotations

import numpy as np
import pytest

from nnhal.device.cpu import native
from nnhal.device.cpu.kernels import _conv_nhwc
from nnhal.graph.node import Node
from nnhal.hostkernels import _conv2d
from nnhal.hostkernels.fused import Activation, FusedNode
from nnhal.operator.base import Info
from nnhal.operator.table import get_prototype

pytestmark = pytest.mark.skipif(not native.available(), reason="the native kernels are not built here "
                                                               "(no C compiler at install, or NNHAL_NATIVE=0)")

CASES = [  # n, c, h, w, m, pads (top, left, bottom, right)
    (1, 64, 24, 24, 64, (1, 1, 1, 1)),          # vgg's 64 -> 64: whole tiles
    (1, 67, 13, 11, 70, (1, 1, 1, 1)),          # odd map: cropped edge tiles; channels not a multiple of 8
    (2, 5, 9, 7, 3, (0, 0, 0, 0)),              # no padding, two images, fewer channels than a vector
    (1, 130, 10, 17, 131, (0, 1, 2, 1)),        # asymmetric pads; more than two 64-channel steps
    (2, 16, 6, 5, 24, (2, 2, 2, 2)),            # padding wider than the kernel's reach: output grows
]


def _node(c, m, pads, bias, act):
    node = Node("conv", "Conv", ["x", "w", "b" if bias else ""], ["y"],
                {"kernel_shape": [3, 3], "strides": [1, 1], "pads": list(pads), "dilations": [1, 1], "group": 1},
                opset=17, version=11)
    get_prototype("", "Conv").normalize(node)
    return node if act is None else FusedNode(**vars(node), activation=act)


def _prepare(n, c, h, w, m, pads, bias, act, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    wv = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
    bv = rng.standard_normal(m).astype(np.float32) if bias else None
    node = _node(c, m, pads, bias, act)
    ins = [Info(np.dtype(np.float32), (n, c, h, w)), Info.of(wv), Info.of(bv) if bias else None]
    outs = get_prototype("", "Conv").infer(node, ins)
    run = _conv_nhwc.ConvWinogradNHWC().prepare(node, ins, outs)
    return run, x, wv, bv, outs[0].shape


def _reference(x, wv, bv, pads):
    """(y, bound): the convolution in float64 (NHWC) and the largest error float32 Winograd F(4x4, 3x3) may make.

    Every float32 step rounds with a relative error of at most u = 2^-24 of its result, and an error of a sum
    is bounded by n * u times the sum of its terms' magnitudes (n: the additions on the longest path). Here
    the path is the input transform (two 1-D passes of at most 3 additions each), the product over C, the
    output transform (two passes of at most 5), the weights' transform (float64, rounded once) and the bias:
    n = C + 20 covers it. The magnitudes are those of the same three-step computation with every matrix and
    operand replaced by its absolute value (|A^T| (|G g G^T| . |B^T d B|) |A| summed over the channels), which
    is what the transform's growth makes of |x| |w|: a tile's corner points (2, -2 and their squares) weigh
    up to 8 x 8 on the output side."""
    n, h, w, c = x.shape
    m = wv.shape[0]
    top, left, bottom, right = pads
    oh, ow = h + top + bottom - 2, w + left + right - 2
    th, tw = -(-oh // 4), -(-ow // 4)
    xp = np.zeros((n, 4 * th + 2, 4 * tw + 2, c))
    xp[:, top:top + h, left:left + w] = x
    bt, g, at = _conv2d.BT, _conv2d.G, _conv2d.AT
    tiles = np.lib.stride_tricks.sliding_window_view(xp, (6, 6), axis=(1, 2))[:, ::4, ::4]   # (n, th, tw, c, 6, 6)
    u = np.einsum("ai,mcij,bj->mcab", g, wv.astype(np.float64), g)
    ua = np.einsum("ai,mcij,bj->mcab", np.abs(g), np.abs(wv.astype(np.float64)), np.abs(g))

    def conv(bt_, t, u_, at_):
        v = np.einsum("ai,nyxcij,bj->nyxcab", bt_, t, bt_)
        z = np.einsum("nyxcab,mcab->nyxmab", v, u_)
        o = np.einsum("ra,nyxmab,sb->nyrxsm", at_, z, at_)
        return o.reshape(n, 4 * th, 4 * tw, m)[:, :oh, :ow]

    y = conv(bt, tiles, u, at)
    scale = conv(np.abs(bt), np.abs(tiles), ua, np.abs(at))
    if bv is not None:
        y = y + bv
        scale = scale + np.abs(bv)
    return y, (c + 20) * 2.0 ** -24 * scale


ACTS = {"none": None, "relu": Activation("relu"),
        "clip": Activation("clip", np.asarray(-0.5, np.float32), np.asarray(0.5, np.float32))}


@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[1]}to{c[4]}-{c[2]}x{c[3]}-n{c[0]}" for c in CASES])
def test_native_winograd_matches_reference(monkeypatch, case, bias, act):
    calls = []
    real = native.winograd_output
    monkeypatch.setattr(native, "winograd_output", lambda *a: (calls.append(1), real(*a))[1])
    n, c, h, w, m, pads = case
    run, x, wv, bv, shape = _prepare(n, c, h, w, m, pads, bias, ACTS[act], c * 7 + m)
    want, bound = _reference(x, wv, bv, pads)
    a = ACTS[act]
    if a is not None:
        # relu and clip move no value further from another: the bound carries over
        want = np.maximum(want, 0) if a.kind == "relu" else np.clip(want, float(a.lo), float(a.hi))
    n_, m_, oh, ow = shape
    y = np.full((n_, oh, ow, m_), np.nan, np.float32)
    (got,) = run([x, wv, bv], [y])
    assert calls, "the native output transform did not run"
    assert got is y
    assert np.all(np.abs(got - want) <= bound + 1e-30)
    (fresh,) = run([x, wv, bv], [None])
    np.testing.assert_array_equal(fresh, y)        # the same prepared kernel on the same input


def test_native_winograd_channel_slices_and_bands(monkeypatch):
    """The output written through its pixel stride into a channel slice of a wider tensor (concatenation in place),
    an input that is a channel slice itself, and bands of tile rows (a scratch budget below one image)."""
    monkeypatch.setattr(_conv_nhwc, "WINOGRAD_BAND_BYTES", 1)
    n, c, h, w, m, pads = 2, 67, 13, 11, 70, (1, 1, 1, 1)
    run, x, wv, bv, shape = _prepare(n, c, h, w, m, pads, True, Activation("relu"), 5)
    want, bound = _reference(x, wv, bv, pads)
    want = np.maximum(want, 0)
    wide = np.full((n, h + 1, w + 2, c + 9), np.nan, np.float32)
    wide[:, :h, :w, 4:4 + c] = x
    out = np.full((n, shape[2], shape[3], m + 13), np.nan, np.float32)
    y = out[..., 5:5 + m]
    (got,) = run([wide[:, :h, :w, 4:4 + c], wv, bv], [y])
    assert got is y
    assert np.all(np.abs(got - want) <= bound + 1e-30)
    assert np.isnan(out[..., :5]).all() and np.isnan(out[..., 5 + m:]).all()      # nothing beside the slice


def test_native_winograd_agrees_with_numpy_transforms(monkeypatch):
    """NNHAL_NATIVE_WINOGRAD=0 keeps the numpy Kronecker-GEMM transforms: both paths within the bound."""
    n, c, h, w, m, pads = 1, 67, 13, 11, 70, (1, 1, 1, 1)
    run, x, wv, bv, _ = _prepare(n, c, h, w, m, pads, True, None, 9)
    monkeypatch.setenv("NNHAL_NATIVE_WINOGRAD", "0")
    calls = []
    monkeypatch.setattr(native, "winograd_input", lambda *a: calls.append(1))
    slow, *_ = _prepare(n, c, h, w, m, pads, True, None, 9)
    want, bound = _reference(x, wv, bv, pads)
    (a,) = run([x, wv, bv], [None])
    (b,) = slow([x, wv, bv], [None])
    assert not calls
    assert np.all(np.abs(a - want) <= bound) and np.all(np.abs(b - want) <= bound)


def test_native_winograd_refuses_bad_arguments():
    x = np.zeros((1, 8, 8, 4), np.float32)
    v = np.zeros(36 * 4 * 4, np.float32)
    act = native.make_act(None)
    with pytest.raises(ValueError, match="band"):
        native.winograd_input(x, v, (1, 8, 8, 4, 1, 1, 2), (0, 2, 0, 2), 1)        # two images of one
    with pytest.raises(ValueError, match="'v'"):
        native.winograd_input(x, v[:-1], (1, 8, 8, 4, 1, 1, 2), (0, 1, 0, 2), 1)   # one float short
    with pytest.raises(ValueError, match="'y'"):
        native.winograd_output(v, np.zeros((1, 8, 8, 3), np.float32), None, act, (1, 8, 8, 4, 2), (0, 1, 0, 2), 1)
    with pytest.raises(ValueError, match="'bias'"):
        native.winograd_output(v, np.zeros((1, 8, 8, 4), np.float32), np.zeros(3, np.float32), act,
                               (1, 8, 8, 4, 2), (0, 1, 0, 2), 1)
