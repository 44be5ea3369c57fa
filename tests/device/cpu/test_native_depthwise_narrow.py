"""The native depthwise kernel (native/nn_dwconv.h) on narrow and odd channel counts, against a float64 reference
within the rounding bound of its sums: whole vectors, a narrower last vector (1..7 live lanes), blocks of 1 to 4
vectors; pixel spans and edge pixels (output widths around the span of 8); strides, dilations, asymmetric and
wide padding (windows wholly in the padding); batch 2; in parts split over the native pool.

The lanes past the channel count read the next pixel's channels: the input sits in a larger buffer followed by
NaN, and the output in one followed by a sentinel, so a dead lane that leaked into a result or a store past the
output shows."""
from __future__ import annotations

import numpy as np
import pytest

from nnhal.conformance.tolerance import assert_within_bound, reduction_bound
from nnhal.device.cpu import native

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.status().reason}")

CHANNELS = [1, 3, 8, 12, 16, 20, 24, 32, 36, 44, 64, 72]
# (h, w, kernel, stride, dilation, pads top, left, bottom, right)
GEOMETRIES = {
    "3x3-s1": (9, 19, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    "3x3-s2": (10, 23, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    "3x3-s2-nopad-odd": (9, 17, (3, 3), (2, 2), (1, 1), (0, 0, 0, 0)),
    "5x5-dil2-asym": (8, 21, (5, 5), (1, 1), (2, 2), (3, 1, 2, 4)),
    "3x5-s2x1-wide-pad": (4, 9, (3, 5), (2, 1), (1, 1), (4, 6, 4, 6)),
    "7x7-w8": (7, 8, (7, 7), (1, 1), (1, 1), (3, 3, 3, 3)),
    "1x1": (3, 17, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
}


def _reference(x: np.ndarray, wt: np.ndarray, bias: np.ndarray | None, g) -> tuple[np.ndarray, np.ndarray]:
    """float64 depthwise convolution of x (n, h, w, c) by wt (kh, kw, c) and the sum of its terms' magnitudes."""
    h, w, (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = g
    n, c = x.shape[0], x.shape[3]
    xp = np.zeros((n, h + pt + pb, w + pl + pr, c))
    xp[:, pt:pt + h, pl:pl + w] = x
    oh, ow = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1, (w + pl + pr - (kw - 1) * dw - 1) // sw + 1
    y = np.zeros((n, oh, ow, c)) + (0.0 if bias is None else bias.astype(np.float64))
    mag = np.zeros_like(y) + (0.0 if bias is None else np.abs(bias.astype(np.float64)))
    for i in range(kh):
        for j in range(kw):
            tap = xp[:, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
            y += tap * wt[i, j]
            mag += np.abs(tap * wt[i, j])
    return y, mag


def _run(c: int, geometry: str, bias: bool, act: str | None, batch: int, parts: int) -> None:
    g = GEOMETRIES[geometry]
    h, w, (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = g
    rng = np.random.default_rng(c * 31 + kh)
    xbuf = np.full(batch * h * w * c + 64, np.nan, np.float32)
    x = xbuf[:batch * h * w * c].reshape(batch, h, w, c)
    x[...] = rng.standard_normal(x.shape)
    wt = rng.standard_normal((kh, kw, c)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32) if bias else None
    expect, mag = _reference(x, wt, b, g)
    oh, ow = expect.shape[1:3]
    conv = native.Conv("depthwise", (batch, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl), wt, b,
                       native.make_act(act))
    ybuf = np.full(expect.size + 64, -7.0, np.float32)
    y = ybuf[:expect.size].reshape(expect.shape)
    y[...] = np.nan
    conv.run(x, y, None, parts)
    if act == "relu":
        expect = np.maximum(expect, 0)
    assert_within_bound(y, expect, reduction_bound(mag, kh * kw + 1))
    assert np.all(ybuf[expect.size:] == -7.0), "a store past the output"


@pytest.mark.parametrize("geometry", list(GEOMETRIES))
@pytest.mark.parametrize("c", CHANNELS)
def test_depthwise_channels_and_geometries(c, geometry):
    _run(c, geometry, bias=True, act="relu", batch=2, parts=1)


@pytest.mark.parametrize("c", [5, 16, 20, 40])
@pytest.mark.parametrize("parts", [2, 3])
def test_depthwise_in_parts_without_bias(c, parts):
    """Split over the native pool by output rows, no bias, no activation."""
    _run(c, "3x3-s2", bias=False, act=None, batch=2, parts=parts)


def _graph(c: int, kernel: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int], pads: tuple):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(c)
    w = rng.standard_normal((c, 1) + kernel).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y0"], group=c, kernel_shape=list(kernel),
                              strides=list(strides), dilations=list(dilations), pads=list(pads)),
             helper.make_node("Relu", ["y0"], ["y"])]
    graph = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, 11, 21])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), w, b


@pytest.mark.parametrize("check", ["0", "1"], ids=["straight", "checked"])
@pytest.mark.parametrize("c,kernel,strides,dilations,pads", [
    (12, (3, 3), (2, 1), (1, 1), (1, 1, 1, 1)), (20, (5, 5), (1, 1), (1, 2), (2, 3, 2, 1)),
    (3, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)), (40, (3, 3), (2, 2), (1, 1), (0, 1, 2, 0))])
def test_depthwise_graph_on_both_plan_paths(monkeypatch, check, c, kernel, strides, dilations, pads):
    """A depthwise Conv + Relu graph through a Session, on the straight-line and the checked plan paths, one and two
    threads, within the rounding bound of the float64 result."""
    import nnhal

    monkeypatch.setenv("NNHAL_CHECK", check)
    model, w, b = _graph(c, kernel, strides, dilations, pads)
    x = np.random.default_rng(7).standard_normal((2, c, 11, 21)).astype(np.float32)
    g = (11, 21, kernel, strides, dilations, (pads[0], pads[1], pads[2], pads[3]))
    expect, mag = _reference(x.transpose(0, 2, 3, 1), w.reshape(c, -1).T.reshape(kernel + (c,)), b, g)
    expect = np.maximum(expect, 0).transpose(0, 3, 1, 2)
    bound = reduction_bound(mag, kernel[0] * kernel[1] + 1).transpose(0, 3, 1, 2)
    for threads in (1, 2):
        with nnhal.Session(model, num_thread=threads) as s:
            (got,) = s.run({"x": x})
        assert_within_bound(got, expect, bound)
