"""The native grouped convolution (nn_gconv.h nn_gconv_nhwc_f32) on the cpu device against onnxruntime:
narrow groups, MG a multiple of 8 (one and two vectors a block), padding, strides, dilations, bias, a fused
Relu, one to eight groups, rows of 6 and 11 pixels (a part of one tile of 8, a tile and a part)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import native

pytestmark = pytest.mark.skipif(not native.available(), reason="the native kernels are not built here "
                                                               "(no C compiler at install, or NNHAL_NATIVE=0)")
ort = pytest.importorskip("onnxruntime")


def _model(n, c, h, w, m, groups, k, stride, dil, pads, bias, relu):
    rng = np.random.default_rng(c * 31 + m + groups)
    wt = (rng.standard_normal((m, c // groups, k, k)) * 0.3).astype(np.float32)
    # a 1x1 convolution first: the grouped one then reads a channels-last tensor (the cpu layout pass)
    w0 = (rng.standard_normal((c, c, 1, 1)) * 0.3).astype(np.float32)
    inits = [numpy_helper.from_array(wt, "w"), numpy_helper.from_array(w0, "w0")]
    ins = ["x0", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b"))
        ins.append("b")
    nodes = [helper.make_node("Conv", ["x", "w0"], ["x0"]),
             helper.make_node("Conv", ins, ["c" if relu else "y"], group=groups, kernel_shape=[k, k],
                              strides=[stride, stride], dilations=[dil, dil], pads=pads)]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


# fewer than four groups, 16 + 8 output channels a group (a two-vector block, then a one-vector one), 32 a group
@pytest.mark.parametrize("c,m,groups", [(48, 48, 6), (64, 64, 8), (32, 64, 8), (40, 40, 5), (64, 128, 4),
                                        (24, 24, 3), (16, 16, 2), (32, 48, 2), (24, 72, 3),
                                        (64, 64, 2)])
@pytest.mark.parametrize("k,stride,dil,pads", [(3, 1, 1, [1, 1, 1, 1]), (3, 2, 1, [1, 1, 1, 1]),
                                               (3, 1, 2, [2, 1, 0, 2]), (1, 1, 1, [0, 0, 0, 0])])
def test_grouped_conv_matches_onnxruntime(monkeypatch, c, m, groups, k, stride, dil, pads):
    calls = []
    real = native.Conv
    monkeypatch.setattr(native, "Conv", lambda kind, *a: (calls.append(kind), real(kind, *a))[1])
    model = _model(2, c, 13, 11, m, groups, k, stride, dil, pads, bias=(groups % 2 == 0), relu=(k == 3))
    x = np.random.default_rng(7).standard_normal((2, c, 13, 11)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = s.run({"x": x})[0]
    assert "grouped" in calls, "the native grouped kernel was not prepared"
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c,k", [(4104, 3), (16, 9)])
def test_grouped_kernel_refuses_what_its_tables_do_not_hold(c, k):
    # nn_gconv.h reads padding from a row of 4096 zeros and keeps a table of at most 64 taps a tile
    groups, cg, mg = 2, c // 2, 8
    geometry = (1, 9, 9, c, 9, 9, groups * mg, k, k, 1, 1, 1, 1, k // 2, k // 2, groups, cg, mg)
    weights = np.zeros((groups, k, k, cg, mg), np.float32)
    with pytest.raises(ValueError, match="kh \\* kw <= 64"):
        native.Conv("grouped", geometry, weights, None, native.make_act(None))
