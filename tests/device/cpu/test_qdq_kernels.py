"""QuantizeLinear / DequantizeLinear with one constant scale and zero point on the cpu device's native one-pass
kernels (device/cpu/kernels/qdq.py, native/nn_qdq.h): bit-equal to the numpy reference kernels (both compute the
ONNX arithmetic in float32 in the same order) and to onnx.reference on ties, saturation and infinities, on the
generated and the checked plan paths; parameters they do not take (per axis, computed) stay on the reference."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.device.cpu import native
from nnhal.hostkernels.op_dequantize_linear import DequantizeLinearKernel
from nnhal.hostkernels.op_quantize_linear import QuantizeLinearKernel

pytestmark = pytest.mark.skipif(not native.available(), reason="the native kernels are not built")

TYPES = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
         np.dtype(np.float32): TensorProto.FLOAT}


class _Node:
    attrs: dict = {}


def _values(n: int, scale: float, extreme: float = np.inf) -> np.ndarray:
    """Random floats with exact ties (k + 0.5 steps), values far past the range, zeros and +-``extreme``
    (onnx.reference rounds through int32: it takes no infinity)."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(n) * 100 * scale).astype(np.float32)
    x[: n // 4] = ((rng.integers(-300, 300, n // 4) + 0.5) * scale).astype(np.float32)
    x[-6:] = [0.0, -0.0, extreme, -extreme, 1e6, -1e6]
    return x


@pytest.mark.parametrize("dtype,zero", [(np.uint8, 128), (np.uint8, 0), (np.int8, -3), (np.int8, 127)])
def test_native_quantize_and_dequantize_equal_the_numpy_kernels(dtype, zero):
    scale = np.float32(0.0173)
    x = _values(4099, float(scale))
    y = np.empty(x.shape, dtype)
    native.quantize_linear(x, y, float(scale), zero)
    want = QuantizeLinearKernel().compute(_Node(), x, np.array(scale), np.array(zero, dtype))
    np.testing.assert_array_equal(y, want)
    back = np.empty(x.shape, np.float32)
    native.dequantize_linear(y, back, float(scale), zero)
    np.testing.assert_array_equal(back, DequantizeLinearKernel().compute(_Node(), y, np.array(scale),
                                                                          np.array(zero, dtype)))


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf")])
def test_a_scale_that_is_not_positive_and_finite_is_a_value_error(scale):
    with pytest.raises(ValueError, match="scale"):
        native.quantize_linear(np.zeros(4, np.float32), np.zeros(4, np.uint8), scale, 0)
    with pytest.raises(ValueError, match="zero"):
        native.dequantize_linear(np.zeros(4, np.int8), np.zeros(4, np.float32), 1.0, 200)


def _qdq_model(dtype, scale, zero, axis_scale=None, computed_scale=False):
    """x -> QuantizeLinear -> DequantizeLinear -> Relu -> y; per-axis parameters with ``axis_scale``, a scale
    computed in the graph (Abs of a constant) with ``computed_scale``."""
    inits = [numpy_helper.from_array(np.asarray(scale if axis_scale is None else axis_scale, np.float32), "s"),
             numpy_helper.from_array(np.asarray(zero if axis_scale is None else [zero] * len(axis_scale), dtype),
                                     "z")]
    nodes = []
    s = "s"
    if computed_scale:
        nodes.append(helper.make_node("Abs", ["s"], ["s_abs"]))
        s = "s_abs"
    nodes += [helper.make_node("QuantizeLinear", ["x", s, "z"], ["q"], axis=1),
              helper.make_node("DequantizeLinear", ["q", s, "z"], ["d"], axis=1),
              helper.make_node("Relu", ["d"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 40])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("q", TYPES[np.dtype(dtype)], None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


def _kernels(session, op):
    return [st.kernel_name for sg in session.graph.execution.subgraphs for st in sg.device_graph.steps
            if st.node.op_type == op]


@pytest.mark.parametrize("check", ["0", "1"])
@pytest.mark.parametrize("dtype,zero", [(np.uint8, 131), (np.int8, -5)])
def test_a_qdq_graph_runs_the_native_kernels_and_equals_onnx_reference(dtype, zero, check, monkeypatch):
    monkeypatch.setenv("NNHAL_CHECK", check)
    model = _qdq_model(dtype, 0.031, zero)
    x = _values(240, 0.031, 1e7).reshape(2, 3, 40)
    with nnhal.Session(model, devices=["cpu"]) as session:
        got = session.run({"x": x})
        assert _kernels(session, "QuantizeLinear") == ["native"]
        assert _kernels(session, "DequantizeLinear") == ["native"]
    want = ReferenceEvaluator(model).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("case", ["per axis", "computed scale"])
def test_parameters_the_native_kernels_do_not_take_stay_on_the_reference_and_correct(case):
    model = _qdq_model(np.uint8, 0.02, 100, axis_scale=[0.01, 0.02, 0.04] if case == "per axis" else None,
                       computed_scale=case == "computed scale")
    x = _values(240, 0.02, 1e7).reshape(2, 3, 40)
    with nnhal.Session(model, devices=["cpu"]) as session:
        got = session.run({"x": x})
        kernels = _kernels(session, "QuantizeLinear") + _kernels(session, "DequantizeLinear")
    if case == "per axis":
        assert "native" not in kernels
    want = ReferenceEvaluator(model).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
