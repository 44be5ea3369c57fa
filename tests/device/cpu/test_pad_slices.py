"""The cpu device's Pad by slice assignments (device/cpu/kernels/pad.py) against onnxruntime, bit for bit
(Pad only moves elements), on both plan paths: every mode, negative pads, the opset 2 / 11 / 18 forms."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.conformance.tolerance import assert_within_bound, gamma
from nnhal.device.cpu.kernels import select
from nnhal.device.cpu.kernels.pad import PadSlices
from nnhal.operator.base import Info
from nnhal.serializer.onnx_import import load_onnx

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (onnx.reference refuses negative pads)")

RNG = np.random.default_rng(28)


def _model(shape, dtype, pads, mode, opset, value=None, axes=None) -> onnx.ModelProto:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits = []
    if opset < 11:
        attrs = {"pads": pads, "mode": mode, **({"value": float(value)} if value is not None else {})}
        node = helper.make_node("Pad", ["x"], ["y"], **attrs)
    else:
        inits.append(numpy_helper.from_array(np.array(pads, np.int64), "pads"))
        inputs = ["x", "pads", ""]
        if value is not None:
            inits.append(numpy_helper.from_array(np.array(value, dtype), "value"))
            inputs[2] = "value"
        if axes is not None:
            inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
            inputs.append("axes")
        node = helper.make_node("Pad", inputs, ["y"], mode=mode)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, shape)],
                              [helper.make_tensor_value_info("y", elem, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _x(shape, dtype):
    return (RNG.standard_normal(shape) * 10).astype(dtype)


def _check(model, x, monkeypatch, oracle=None):
    if oracle is None:
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    else:
        want = oracle(model)
    want = want.run(None, {"x": x})[0]
    for check in ("1", "0"):
        monkeypatch.setenv("NNHAL_CHECK", check)
        with nnhal.Session(model, devices=["cpu"], num_thread=1) as s:
            got = s.run({"x": x})[0]
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[0, 0, 1, 2, 0, 0, 3, 1], [0, 1, 0, 2, 1, 0, 2, 0], [0, 0, -1, 2, 0, 0, 1, -2]])
def test_modes_and_negative_pads(mode, pads, monkeypatch):
    _check(_model([2, 3, 5, 6], np.float32, pads, mode, 19), _x((2, 3, 5, 6), np.float32), monkeypatch)


@pytest.mark.parametrize("opset", [2, 11, 13])
def test_opset_forms_with_a_value(opset, monkeypatch):
    _check(_model([2, 4, 3], np.float32, [1, 0, 2, 0, 3, 1], "constant", opset, value=-1.5),
           _x((2, 4, 3), np.float32), monkeypatch)


def test_opset18_axes_input(monkeypatch):
    _check(_model([1, 3, 9], np.float32, [2, 1, 0, 2], "reflect", 18, axes=[-1, 1]), _x((1, 3, 9), np.float32),
           monkeypatch)


@pytest.mark.parametrize("dtype", [np.int64, np.float16, np.uint8])
def test_dtypes(dtype, monkeypatch):
    _check(_model([3, 4], dtype, [1, 2, 0, 1], "constant", 13, value=7), _x((3, 4), dtype), monkeypatch)


def test_the_slices_kernel_is_chosen_and_falls_back():
    """Reflect pads as wide as the axis need np.pad's repeated reflection: the reference kernel runs them."""
    def chosen(pads, mode):
        model = _model([1, 3], np.float32, pads, mode, 13)
        node = load_onnx(model).nodes[0]
        ins = [Info(np.dtype(np.float32), (1, 3)), Info(np.dtype(np.int64), (4,), value=np.array(pads))]
        outs = [Info(np.dtype(np.float32), (1 + pads[0] + pads[2], 3 + pads[1] + pads[3]))]
        return type(select(node, ins, outs))

    assert chosen([0, 1, 0, 2], "reflect") is PadSlices
    assert chosen([0, 3, 0, 0], "reflect") is not PadSlices


def test_reflect_wider_than_the_axis(monkeypatch):
    """np.pad's repeated reflection, as onnx.reference defines it (onnxruntime refuses these pads)."""
    _check(_model([1, 3], np.float32, [0, 3, 0, 4], "reflect", 13), _x((1, 3), np.float32), monkeypatch,
           oracle=ReferenceEvaluator)


@pytest.mark.parametrize("mode, pads", [("reflect", [0, 0, 1, 2, 0, 0, 2, 1]), ("edge", [0, 0, 1, 1, 0, 0, 1, 1]),
                                        ("constant", [0, 1, 1, 0, 0, 2, 0, 1])])
@pytest.mark.usefixtures("conversions_at_edges")     # the edges this test is about convert
def test_between_convolutions_stays_channels_last(mode, pads, monkeypatch):
    """Conv -> Pad -> Conv: the Pad runs on the NHWC storage, no conversion between (against onnxruntime
    within the convolutions' rounding: sums of 9 * 4 and 9 * c products)."""
    c = 4 + pads[1] + pads[5]
    w1 = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    w2 = RNG.standard_normal((5, c, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Pad", ["a", "pads"], ["p"], mode=mode),
             helper.make_node("Conv", ["p", "w2"], ["y"])]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(np.float32))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem, [1, 3, 8, 9])],
                              [helper.make_tensor_value_info("y", elem, None)],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
                               numpy_helper.from_array(np.array(pads, np.int64), "pads")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = _x((1, 3, 8, 9), np.float32) / 10
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    a_max = 27 * float(np.abs(x).max() * np.abs(w1).max())
    bound = 2 * (gamma(28) + gamma(9 * c + 1)) * a_max * 9 * c * float(np.abs(w2).max())
    for check in ("1", "0"):
        monkeypatch.setenv("NNHAL_CHECK", check)
        with nnhal.Session(model, devices=["cpu"], num_thread=1) as s:
            assert_within_bound(s.run({"x": x})[0], want, bound)
            steps = [(st.node.op_type, st.kernel_name) for sg in s.subgraphs for st in sg.device_graph.steps]
        assert ("Pad", "nhwc-slices") in steps
        assert [k for _, k in steps].count("to-nchw") == 1         # the output's, after the second Conv
