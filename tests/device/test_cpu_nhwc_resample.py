"""Resize and ConvTranspose inside channels-last regions: no layout conversion around them, results as the
ONNX reference evaluator's."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal

C = 8


def _between_convs(middle: list, inits: list, h: int = 10, w: int = 12, inputs: tuple = ()):
    """Conv -> middle -> Conv over a (1, 3, h, w) image: the middle op sits inside an NHWC region (``inputs``:
    further graph inputs of the middle op, (name, value) pairs, fed with their values)."""
    rng = np.random.default_rng(11)
    inits = inits + [numpy_helper.from_array(rng.standard_normal((C, 3, 3, 3)).astype(np.float32), "w0"),
                     numpy_helper.from_array(rng.standard_normal((4, C, 3, 3)).astype(np.float32), "w1")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], name="conv0", pads=[1, 1, 1, 1]), *middle,
             helper.make_node("Conv", ["b", "w1"], ["y"], name="conv1", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "region", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, h, w))]
                              + [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape) for n, v in inputs],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((1, 3, h, w)).astype(np.float32), **dict(inputs)}


def _check(model, feeds, op: str):
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    # float32 sums in another order: conv0 (27 terms), the middle op (at most 4 taps, or C * k * k = 128 terms
    # of ConvTranspose), conv1 (72 terms): at most ~227 roundings, each relative to a partial sum of terms
    # whose magnitudes stay within a small multiple of the largest output (random weights): 600 ulps of it
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run(feeds)[0]
        kernels = s.subgraphs[0].stats["kernels"]
        steps = [(st.node.op_type, st.kernel_name) for st in s.subgraphs[0].device_graph.steps]
    assert kernels["mid"] in ("nhwc", "nhwc-native")       # numpy's, or the native Resize (kernels/resize.py)
    # the image enters NHWC once before conv0 and leaves once after conv1: nothing converts around the middle
    assert [k for _, k in steps if k in ("to-nhwc", "to-nchw")] == ["to-nhwc", "to-nchw"], steps
    assert got.shape == want.shape
    scale = np.max(np.abs(want))
    np.testing.assert_allclose(got, want, rtol=0, atol=scale * 600 * 2.0 ** -23)


@pytest.mark.parametrize("mode,transform,nearest", [
    ("nearest", "asymmetric", "floor"), ("nearest", "half_pixel", "round_prefer_floor"),
    ("linear", "half_pixel", "round_prefer_floor"), ("linear", "align_corners", "round_prefer_floor"),
    ("linear", "pytorch_half_pixel", "round_prefer_floor")])
@pytest.mark.parametrize("by_sizes", [False, True])
@pytest.mark.usefixtures("conversions_at_edges")     # the edges this test is about convert
def test_resize_stays_channels_last(mode, transform, nearest, by_sizes):
    inits = [numpy_helper.from_array(np.array([1, C, 17, 24], np.int64), "sizes")] if by_sizes else \
        [numpy_helper.from_array(np.array([1, 1, 2, 1.5], np.float32), "scales")]
    inputs = ["a", "", "", "sizes"] if by_sizes else ["a", "", "scales"]
    node = helper.make_node("Resize", inputs, ["b"], name="mid", mode=mode, coordinate_transformation_mode=transform,
                            nearest_mode=nearest)
    _check(*_between_convs([node], inits), "Resize")


@pytest.mark.parametrize("kernel,stride,pads,dilation,out_pad", [
    (2, 2, 0, 1, 0), (3, 2, 1, 1, 1), (4, 2, 1, 1, 0), (3, 1, 1, 2, 0), (3, 3, 0, 1, 2)])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.usefixtures("conversions_at_edges")     # the edges this test is about convert
def test_conv_transpose_stays_channels_last(kernel, stride, pads, dilation, out_pad, bias):
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.standard_normal((C, C, kernel, kernel)).astype(np.float32), "wt")]
    inputs = ["a", "wt"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(C).astype(np.float32), "bt"))
        inputs.append("bt")
    node = helper.make_node("ConvTranspose", inputs, ["b"], name="mid", kernel_shape=[kernel, kernel],
                            strides=[stride, stride], pads=[pads] * 4, dilations=[dilation, dilation],
                            output_padding=[out_pad, out_pad])
    _check(*_between_convs([node], inits, 6, 7), "ConvTranspose")


@pytest.mark.parametrize("kernel,stride,pads,dilation,out_pad", [(2, 2, 0, 1, 0), (3, 2, 1, 1, 1), (3, 1, 1, 2, 0)])
@pytest.mark.parametrize("bias", ["none", "constant", "run-time"])
@pytest.mark.usefixtures("conversions_at_edges")     # the edges this test is about convert
def test_conv_transpose_with_run_time_weights_stays_channels_last(kernel, stride, pads, dilation, out_pad, bias):
    """Weights fed as a graph input (a dynamic-filter decoder): packed at the run, still channels last."""
    rng = np.random.default_rng(3)
    extra = [("wt", rng.standard_normal((C, C, kernel, kernel)).astype(np.float32))]
    inits, names = [], ["a", "wt"]
    if bias == "constant":
        inits.append(numpy_helper.from_array(rng.standard_normal(C).astype(np.float32), "bt"))
    elif bias == "run-time":
        extra.append(("bt", rng.standard_normal(C).astype(np.float32)))
    if bias != "none":
        names.append("bt")
    node = helper.make_node("ConvTranspose", names, ["b"], name="mid", kernel_shape=[kernel, kernel],
                            strides=[stride, stride], pads=[pads] * 4, dilations=[dilation, dilation],
                            output_padding=[out_pad, out_pad])
    _check(*_between_convs([node], inits, 6, 7, tuple(extra)), "ConvTranspose")
