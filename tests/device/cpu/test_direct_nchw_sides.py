"""The direct convolution's channels-first sides (kernels.c "direct" geometry's layouts, direct_conv.READ_NCHW and
WRITE_NCHW, kernels/_conv_nhwc.py ConvDirectChannelsFirst) and the layout pass taking them (layout.py's nchw_input
and nchw_output hooks): a stem reading the model's NCHW image in place and a last convolution writing the model's
NCHW output, with no Transpose step at either edge of the NHWC region. Against a float64 reference (the kernel) and
onnxruntime (the graphs), on odd channel counts, strides, dilations, asymmetric pads, batches and part counts."""
from __future__ import annotations

import types

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import native
from nnhal.device.cpu.kernels._conv_nhwc import ConvGemmNHWC
from nnhal.device.cpu.native import direct_conv
from tests.device.cpu.test_native_direct import CASES, _reference

pytestmark = pytest.mark.skipif(not native.available(), reason="the native kernels are not built here "
                                                               "(no C compiler at install, or NNHAL_NATIVE=0)")

LAYOUTS = {"nchw-in": direct_conv.READ_NCHW, "nchw-out": direct_conv.WRITE_NCHW,
           "both": direct_conv.READ_NCHW | direct_conv.WRITE_NCHW}


def _geometry(n, c, m, h, w, k, stride, dil, pads):
    oh = (h + pads[0] + pads[2] - (k - 1) * dil - 1) // stride + 1
    ow = (w + pads[1] + pads[3] - (k - 1) * dil - 1) // stride + 1
    return types.SimpleNamespace(n=n, h=h, w=w, c=c, m=m, oh=oh, ow=ow, kernel=(k, k), strides=(stride, stride),
                                 dilations=(dil, dil), pads=tuple(pads))


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("parts", [1, 3])
@pytest.mark.parametrize("c,m,h,w,k,stride,dil,pads", CASES)
def test_channels_first_sides_match_reference(c, m, h, w, k, stride, dil, pads, parts, layout):
    """Every direct-kernel case (both walks: rows of at most 32 pixels and wider) with a channels-first input,
    output or both, a batch of 2 (one image a call), a fused Relu, split into 1 or 3 parts."""
    layouts = LAYOUTS[layout]
    rng = np.random.default_rng(c * 7 + m + k + layouts)
    wt = rng.standard_normal((m, c, k, k)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32) if m % 2 == 0 else None
    x = rng.standard_normal((2, c, h, w)).astype(np.float32)
    s = _geometry(2, c, m, h, w, k, stride, dil, pads)
    conv = direct_conv.make(s, wt, bias, native.make_act("relu"), layouts)
    xin = x if layouts & direct_conv.READ_NCHW else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    nchw_out = layouts & direct_conv.WRITE_NCHW
    y = np.full((2, m, s.oh, s.ow) if nchw_out else (2, s.oh, s.ow, m), np.nan, np.float32)
    conv.run(xin, y, None, parts)
    got = y if nchw_out else y.transpose(0, 3, 1, 2)
    want, scale = _reference(x, wt, bias, stride, dil, pads, True)
    # float32 sums of c * k * k products in any order: each term's rounding is at most 2^-24 relative per add
    bound = (c * k * k + 2) * 2.0 ** -24 * scale + 1e-30
    assert got.shape == want.shape
    assert np.all(np.abs(got - want) <= bound)


@pytest.mark.parametrize("parts", [1, 2])
def test_nchw_input_into_a_channel_slice_of_a_wider_output(parts):
    """A channels-first input written into channels 3..3+M of a wider channels-last tensor (a Concat's buffer), a
    batch of 3 odd-sized images: each image lands at its own pixel stride, the other channels stay untouched."""
    c, m, h, w = 5, 11, 9, 13
    rng = np.random.default_rng(parts)
    wt = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    x = rng.standard_normal((3, c, h, w)).astype(np.float32)
    s = _geometry(3, c, m, h, w, 3, 2, 1, [1, 0, 1, 2])
    wide = np.full((3, s.oh, s.ow, m + 7), np.nan, np.float32)
    conv = direct_conv.make(s, wt, bias, native.make_act("relu"), direct_conv.READ_NCHW)
    conv.run(x, wide[..., 3:3 + m], None, parts)
    want, scale = _reference(x, wt, bias, 2, 1, [1, 0, 1, 2], True)
    bound = (c * 9 + 2) * 2.0 ** -24 * scale + 1e-30
    assert np.all(np.abs(wide[..., 3:3 + m].transpose(0, 3, 1, 2) - want) <= bound)
    assert np.isnan(wide[..., :3]).all() and np.isnan(wide[..., 3 + m:]).all()


def test_channels_last_run_unchanged_by_the_sides():
    """The same convolution with layouts 0 (the default geometry of 16) and through both channels-first sides
    gives the same sums: the NCHW sides change where values are read and stored, not the order of the sums in
    the row walk's inside tiles (3 -> 16 at 40 pixels a row, no padding)."""
    rng = np.random.default_rng(3)
    wt = rng.standard_normal((16, 3, 3, 3)).astype(np.float32)
    x = rng.standard_normal((1, 3, 10, 42)).astype(np.float32)
    s = _geometry(1, 3, 16, 10, 42, 3, 1, 1, [0, 0, 0, 0])
    act = native.make_act(None)
    last = np.empty((1, s.oh, s.ow, 16), np.float32)
    direct_conv.make(s, wt, None, act).run(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), last, None, 1)
    first = np.empty((1, 16, s.oh, s.ow), np.float32)
    direct_conv.make(s, wt, None, act, LAYOUTS["both"]).run(x, first, None, 1)
    want, scale = _reference(x, wt, None, 1, 1, [0, 0, 0, 0], False)
    bound = (27 + 2) * 2.0 ** -24 * scale + 1e-30
    assert np.all(np.abs(first - want) <= bound)
    assert np.all(np.abs(last.transpose(0, 3, 1, 2) - want) <= bound)


def test_layouts_outside_0_to_3_are_refused():
    geometry = (1, 5, 5, 3, 5, 5, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8, 4)
    with pytest.raises(ValueError, match="layouts"):
        native.Conv("direct", geometry, np.zeros(3 * 3 * 3 * 8, np.float32), None, native.make_act("relu"))


def _net(n, c, h, w, stem_stride, mid, out_c, out_k, act, seed):
    """input (n, c, h, w) -> Conv c -> mid 3x3 (stem) -> act -> MaxPool 3x3 s1 -> Conv mid -> out_c out_k (the
    output), a second output read from the pool by a Conv on another branch so the region has two exits."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((mid, c, 3, 3)).astype(np.float32) * 0.4, "w0"),
             numpy_helper.from_array(rng.standard_normal(mid).astype(np.float32), "b0"),
             numpy_helper.from_array(rng.standard_normal((out_c, mid, out_k, out_k)).astype(np.float32) * 0.2, "w1"),
             numpy_helper.from_array(rng.standard_normal(out_c).astype(np.float32), "b1")]
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], kernel_shape=[3, 3], strides=[stem_stride] * 2,
                              pads=[1, 0, 2, 1])]
    if act == "silu":
        nodes += [helper.make_node("Sigmoid", ["c0"], ["s0"]), helper.make_node("Mul", ["c0", "s0"], ["a0"])]
    else:
        nodes.append(helper.make_node("Relu", ["c0"], ["a0"]))
    nodes += [helper.make_node("MaxPool", ["a0"], ["p0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
              helper.make_node("Conv", ["p0", "w1", "b1"], ["y"], kernel_shape=[out_k, out_k],
                               pads=[out_k // 2] * 4),
              helper.make_node("Relu", ["y"], ["yr"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])],
                          [helper.make_tensor_value_info("yr", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": rng.standard_normal((n, c, h, w)).astype(np.float32)}


def _steps(model, feeds, threads=2):
    with nnhal.Session(model, devices=["cpu"], num_thread=threads) as s:
        got = s.run(feeds)
        steps = [(st.node.op_type, st.kernel_name) for sg in s.subgraphs for st in sg.device_graph.steps]
    return got, steps


NETS = {  # n, c, h, w, stem stride, mid, out channels, out kernel, activation
    "rgb-stem": (1, 3, 33, 45, 2, 16, 24, 3, "relu"),
    "one-channel-wide": (1, 1, 12, 70, 1, 13, 5, 3, "silu"),
    "batch-odd": (2, 5, 17, 11, 2, 20, 7, 3, "relu"),
    "out-1x1": (1, 3, 24, 24, 1, 12, 3, 1, "silu"),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", list(NETS))
def test_region_edges_run_without_conversions(name, threads):
    ort = pytest.importorskip("onnxruntime")
    model, feeds = _net(*NETS[name], seed=len(name))
    (got,), steps = _steps(model, feeds, threads)
    assert ("Conv", "direct-nchw-in") in steps, steps
    assert ("Conv", "direct-nchw-out") in steps, steps
    assert not any(op == "Transpose" for op, _ in steps), steps
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    # a second conv of mid * 9 float32 products over values of magnitude ~ the first's: a relative bound on
    # each output's scale, taken over the whole output
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_without_the_hooks_the_conversions_come_back(monkeypatch):
    model, feeds = _net(*NETS["rgb-stem"], seed=1)
    (direct,), _ = _steps(model, feeds)
    monkeypatch.setattr(ConvGemmNHWC, "nchw_input", lambda self, node, ins, outs: None)
    monkeypatch.setattr(ConvGemmNHWC, "nchw_output", lambda self, node, ins, outs: None)
    (converted,), steps = _steps(model, feeds)
    assert ("Transpose", "to-nhwc") in steps and ("Transpose", "to-nchw") in steps, steps
    assert not any(kernel.startswith("direct-nchw") for _, kernel in steps), steps
    # the same tile sums in the same order, read and stored elsewhere: the edge pixels of the stem run one at a
    # time reading NCHW and through a tap table channels last, whose sums may round differently
    np.testing.assert_allclose(direct, converted, rtol=1e-5, atol=1e-5 * float(np.abs(converted).max()))


def test_many_input_channels_keep_the_conversion():
    """Above DIRECT_NCHW_MAX_C input channels the stem keeps the channels-last read after a conversion."""
    from nnhal.device.cpu.kernels import _conv_nhwc

    c = _conv_nhwc.DIRECT_NCHW_MAX_C + 1
    model, feeds = _net(1, c, 16, 16, 1, 16, 8, 3, "relu", seed=2)
    (got,), steps = _steps(model, feeds)
    assert ("Transpose", "to-nhwc") in steps and ("Conv", "direct-nchw-in") not in steps, steps
