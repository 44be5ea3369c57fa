"""Resize inside a channels-last region on the native separable kernel (device/cpu/kernels/resize.py): the same
result as the numpy channels-last kernel (up to fused multiply-adds) and as onnx.reference, for nearest, linear,
cubic and antialiased resizes, up and down, at batch 2."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.device.cpu import native
from nnhal.device.cpu.kernels.resize import ResizeNHWCNative

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native kernels absent: {native.status().reason}")

EPS32 = 2.0 ** -24

CASES = {
    "nearest-x2": dict(mode="nearest", scales=[1, 1, 2, 2]),
    "nearest-floor-sizes": dict(mode="nearest", nearest_mode="floor", sizes=[2, 16, 13, 7]),
    "linear-half-pixel-x2": dict(mode="linear", scales=[1, 1, 2, 2]),
    "linear-align-corners": dict(mode="linear", coordinate_transformation_mode="align_corners", sizes=[2, 16, 17, 23]),
    "linear-asymmetric-down": dict(mode="linear", coordinate_transformation_mode="asymmetric",
                                   scales=[1, 1, 0.5, 0.75]),
    "cubic-x1.5": dict(mode="cubic", scales=[1, 1, 1.5, 1.5]),
    "linear-antialias-down": dict(mode="linear", antialias=1, scales=[1, 1, 0.25, 0.3]),
    "linear-w-only": dict(mode="linear", scales=[1, 1, 1, 2]),
}


def _model(case: dict):
    rng = np.random.default_rng(3)
    attrs = {k: v for k, v in case.items() if k not in ("scales", "sizes")}
    inits = [numpy_helper.from_array(rng.standard_normal((16, 8, 1, 1)).astype(np.float32), "w")]
    ins = ["c", "", ""]
    if "scales" in case:
        inits.append(numpy_helper.from_array(np.array(case["scales"], np.float32), "scales"))
        ins[2] = "scales"
    else:
        inits.append(numpy_helper.from_array(np.array(case["sizes"], np.int64), "sizes"))
        ins = ["c", "", "", "sizes"]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Resize", ins, ["y"], **attrs)]
    graph = helper.make_graph(nodes, "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 8, 12, 10))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    return model, {"x": rng.standard_normal((2, 8, 12, 10)).astype(np.float32)}


def _run(model, feeds, threads=2):
    with nnhal.Session(model, devices=["cpu"], num_thread=threads) as s:
        (y,) = s.run(feeds)
        kernels = {st.node.op_type: st.kernel_name for sg in s.subgraphs for st in sg.device_graph.steps}
    return y, kernels


@pytest.mark.parametrize("name", list(CASES))
def test_native_resize_matches_the_numpy_kernel_and_the_reference(monkeypatch, name):
    # y is the graph output: an upsampling would write it NCHW directly (test_native_resize_nchw.py); this test
    # is about the NHWC kernel, so that variant is off
    monkeypatch.setattr(ResizeNHWCNative, "nchw_output", lambda self, node, ins, outs: None)
    model, feeds = _model(CASES[name])
    got, kernels = _run(model, feeds)
    assert kernels["Resize"] == "nhwc-native", kernels
    monkeypatch.setattr(ResizeNHWCNative, "score", lambda self, node, ins, outs: 0)
    numpy_nhwc, kernels = _run(model, feeds)
    assert kernels["Resize"] == "nhwc"
    assert got.shape == numpy_nhwc.shape
    # each output is two weighted sums (rows, then columns) of float32 products; a fused multiply-add drops one
    # rounding per tap, so the two differ by a few roundings of the sum of |weight * value| (cubic's negative
    # weights make that sum up to ~1.6x the largest value)
    peak = float(np.abs(numpy_nhwc).max()) * 2.0
    np.testing.assert_allclose(got, numpy_nhwc, rtol=0, atol=16 * EPS32 * peak)
    # and the ONNX semantics: onnx.reference in float64 terms (the 1x1 conv sums 8 products first)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=64 * EPS32 * peak)


def test_one_thread_and_two_agree_bit_for_bit():
    # rows are independent: how they are split over the pool changes no arithmetic
    model, feeds = _model(CASES["cubic-x1.5"])
    one, _ = _run(model, feeds, threads=1)
    two, _ = _run(model, feeds, threads=2)
    np.testing.assert_array_equal(one, two)


def test_extrapolated_coordinates_stay_with_the_numpy_kernel():
    model, feeds = _model(dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
                                 extrapolation_value=-7.0, sizes=[2, 16, 20, 20]))
    # a roi reaching outside the image: some output coordinates are extrapolated
    roi = numpy_helper.from_array(np.array([0, 0, -0.2, -0.2, 1, 1, 1.2, 1.2], np.float32), "roi")
    model.graph.initializer.append(roi)
    model.graph.node[1].input[1] = "roi"
    got, kernels = _run(model, feeds)
    assert kernels["Resize"] != "nhwc-native"
    assert (got == -7.0).any()
