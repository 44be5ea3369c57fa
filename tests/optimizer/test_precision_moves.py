"""optimizer/precision.py: the int8 / uint8 pass runs Split (constant sizes) and nearest Resize on the 8-bit codes
with their input's quantization, like MaxPool and the reshapes (``_moves_codes``): no DequantizeLinear /
QuantizeLinear around them and no second rounding of their outputs; a linear Resize still runs in float."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import nnhal
from tests.conftest import make_model, vinfo


def _model(mode: str = "nearest", crop: bool = False):
    """x -> Conv a -> Split [3, 5] -> (Conv b, Conv c) -> Concat -> Resize x2 (``mode``; with ``crop``
    tf_crop_and_resize over a roi reaching outside the image, whose pixels there take extrapolation_value) ->
    Conv d -> y."""
    rng = np.random.default_rng(31)
    inits = {"wa": rng.standard_normal((8, 3, 3, 3)) * 0.3, "wb": rng.standard_normal((4, 3, 1, 1)) * 0.5,
             "wc": rng.standard_normal((4, 5, 3, 3)) * 0.2, "wd": rng.standard_normal((6, 8, 3, 3)) * 0.2,
             "sizes": np.array([3, 5], np.int64), "scales": np.array([1, 1, 2, 2], np.float32),
             "roi": np.array([0, 0, -0.2, -0.2, 1, 1, 1.2, 1.2], np.float32)}
    inits = {k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in inits.items()}
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Split", ["a", "sizes"], ["s0", "s1"], axis=1),
             helper.make_node("Conv", ["s0", "wb"], ["b"]),
             helper.make_node("Conv", ["s1", "wc"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["b", "c"], ["cat"], axis=1),
             helper.make_node("Resize", ["cat", "roi", "scales"], ["up"], mode=mode,
                              coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=0.5)
             if crop else helper.make_node("Resize", ["cat", "", "scales"], ["up"], mode=mode),
             helper.make_node("Conv", ["up", "wd"], ["y"], pads=[1, 1, 1, 1])]
    model = make_model(nodes, [vinfo("x", [2, 3, 10, 9])], [vinfo("y", [2, 6, 20, 18])],
                       [numpy_helper.from_array(v, k) for k, v in inits.items()])
    feeds = [{"x": rng.standard_normal((2, 3, 10, 9)).astype(np.float32)} for _ in range(3)]
    return model, feeds


def _ops(session):
    return [st.node.op_type for sg in session.graph.execution.subgraphs for st in sg.device_graph.steps]


def _near_fp32_and_as_reference(model, feeds, got, precision, table, monkeypatch):
    """``got`` (the quantized session's output) is within 5% of fp32 and equal to the same plan on the numpy
    reference kernels."""
    with nnhal.Session(model, devices=["cpu"]) as fp32:
        want = fp32.run(feeds)[0]
    assert np.linalg.norm(got - want) <= 0.05 * np.linalg.norm(want)
    monkeypatch.setenv("NNHAL_CPU_REFERENCE", "1")       # the same plan on the numpy reference kernels
    with nnhal.Session(model, devices=["cpu"], precision=precision, calibration=table) as ref:
        np.testing.assert_array_equal(got, ref.run(feeds)[0])


@pytest.mark.parametrize("precision", ["int8", "uint8"])
def test_split_and_nearest_resize_run_on_codes(precision, monkeypatch):
    model, feeds = _model()
    table = nnhal.calibrate(model, feeds[:2], progress=False)
    with nnhal.Session(model, devices=["cpu"], precision=precision, calibration=table) as q:
        got = q.run(feeds[2])[0]
        ops = _ops(q)
    # the image quantized once and the output dequantized once; Split and Resize between the integer convolutions
    assert ops.count("QuantizeLinear") == 1 and ops.count("DequantizeLinear") == 1, ops
    assert "Split" in ops and "Resize" in ops
    _near_fp32_and_as_reference(model, feeds[2], got, precision, table, monkeypatch)


def test_a_linear_resize_stays_in_float():
    model, feeds = _model("linear")
    table = nnhal.calibrate(model, feeds[:2], progress=False)
    with nnhal.Session(model, devices=["cpu"], precision="int8", calibration=table) as q:
        q.run(feeds[2])
        ops = _ops(q)
    assert ops.count("DequantizeLinear") == 2 and ops.count("QuantizeLinear") == 2, ops


def test_a_cropping_resize_stays_in_float():
    """tf_crop_and_resize fills the pixels outside the image with extrapolation_value, a float: on the codes it
    would be read as a code, so that Resize keeps its DequantizeLinear / QuantizeLinear and stays near fp32."""
    model, feeds = _model(crop=True)
    table = nnhal.calibrate(model, feeds[:2], progress=False)
    with nnhal.Session(model, devices=["cpu"], precision="int8", calibration=table) as q:
        got = q.run(feeds[2])[0]
        ops = _ops(q)
    assert ops.count("DequantizeLinear") == 2 and ops.count("QuantizeLinear") == 2, ops
    with nnhal.Session(model, devices=["cpu"]) as fp32:
        want = fp32.run(feeds[2])[0]
    assert np.linalg.norm(got - want) <= 0.05 * np.linalg.norm(want)


def _stem(relu: str = "Relu"):
    """x -> Conv -> Relu (or Clip(0, 6)) -> MaxPool 3x3 / 2 -> Conv -> y: ResNet's stem."""
    rng = np.random.default_rng(7)
    inits = {"w0": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
             "w1": (rng.standard_normal((6, 8, 3, 3)) * 0.2).astype(np.float32),
             "lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}
    act = helper.make_node("Relu", ["a"], ["r"]) if relu == "Relu" else \
        helper.make_node("Clip", ["a", "lo", "hi"], ["r"])
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]), act,
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p", "w1"], ["y"], pads=[1, 1, 1, 1])]
    model = make_model(nodes, [vinfo("x", [2, 3, 12, 11])], [vinfo("y", [2, 6, 6, 6])],
                       [numpy_helper.from_array(v, k) for k, v in inits.items()])
    feeds = [{"x": rng.standard_normal((2, 3, 12, 11)).astype(np.float32)} for _ in range(3)]
    return model, feeds


@pytest.mark.parametrize("relu", ["Relu", "Clip"])
@pytest.mark.parametrize("precision", ["int8", "uint8"])
def test_a_clamp_before_maxpool_runs_on_codes(precision, relu, monkeypatch):
    """conv -> Relu -> MaxPool -> conv: the clamp becomes a lookup on the codes (then the conv's clamp), MaxPool runs
    on the codes; before, int8 ran DequantizeLinear -> Relu -> MaxPool in float -> QuantizeLinear."""
    model, feeds = _stem(relu)
    table = nnhal.calibrate(model, feeds[:2], progress=False)
    with nnhal.Session(model, devices=["cpu"], precision=precision, calibration=table) as q:
        got = q.run(feeds[2])[0]
        ops = _ops(q)
    assert ops.count("QuantizeLinear") == 1 and ops.count("DequantizeLinear") == 1, ops
    assert relu not in ops and "MaxPool" in ops, ops
    _near_fp32_and_as_reference(model, feeds[2], got, precision, table, monkeypatch)
