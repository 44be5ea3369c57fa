"""Tanh natively (native/nn_tanh.h, the Act kind "tanh"): the kernel against float64 tanh over the whole float32
range and its special values, the Tanh op's native kernel, and Tanh fused into a convolution's epilogue
(device/cpu/fusions.py) against onnxruntime on both plan paths."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import native

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")
needs_native = pytest.mark.skipif(not native.available(), reason=f"native kernels not loaded: {native.status().reason}")
# nn_tanhf's documented accuracy (~3 ulp), with one ulp to spare
ULPS = 4


def _values() -> np.ndarray:
    rng = np.random.default_rng(5)
    special = np.array([0.0, -0.0, 1e-30, -1e-38, 1e-45, 0.3, 0.6249, 0.625, 0.6251, -0.625, 1.0, 8.9, 9.1, 20.0,
                        -44.0, 88.0, 89.0, 1e30, -1e30, np.inf, -np.inf, np.nan], np.float32)
    return np.concatenate([special, rng.standard_normal(5000).astype(np.float32) * 3,
                           rng.uniform(-0.7, 0.7, 3001).astype(np.float32)])


@needs_native
@pytest.mark.parametrize("parts", [1, 3])
def test_native_tanh_is_within_a_few_ulp_of_float64(parts):
    x = _values()
    y = np.empty_like(x)
    native.activation(x, y, native.make_act("tanh"), parts)
    want = np.tanh(x.astype(np.float64)).astype(np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(y), nan)
    ulp = np.spacing(np.abs(want[~nan]))
    assert np.all(np.abs(y[~nan].astype(np.float64) - want[~nan]) <= ULPS * ulp)
    assert np.all(np.abs(y[~nan]) <= 1.0)
    assert np.signbit(y[1]) and y[0] == 0.0        # -0.0 keeps its sign
    x2 = x.copy()
    native.activation(x2, x2, native.make_act("tanh"), parts)             # in place
    np.testing.assert_array_equal(x2, y)


def _conv_tanh(tanh_output: bool):
    """x -> Conv 3x3 -> Tanh -> Conv 1x1 -> Tanh (the output, or read again by a Relu too)."""
    rng = np.random.default_rng(3)
    w1 = numpy_helper.from_array((rng.standard_normal((7, 3, 3, 3)) * 0.5).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(7).astype(np.float32), "b1")
    w2 = numpy_helper.from_array((rng.standard_normal((5, 7, 1, 1)) * 0.8).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Tanh", ["c1"], ["t1"]),
             helper.make_node("Conv", ["t1", "w2"], ["c2"]),
             helper.make_node("Tanh", ["c2"], ["y"])]
    outputs = ["y"]
    if tanh_output:
        nodes.append(helper.make_node("Relu", ["c1"], ["r"]))
        outputs.append("r")
    graph = helper.make_graph(nodes, "conv_tanh", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                 (1, 3, 23, 19))],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                              [w1, b1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("checked", [False, True], ids=["generated", "checked"])
@pytest.mark.parametrize("reread", [False, True], ids=["fused", "reread"])
def test_tanh_after_a_convolution_matches_onnxruntime(monkeypatch, checked, reread):
    if checked:
        monkeypatch.setenv("NNHAL_CHECK", "1")
    model = _conv_tanh(reread)
    x = (np.random.default_rng(4).standard_normal((1, 3, 23, 19)) * 2).astype(np.float32)
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run({"x": x})
        steps = [st for sg in s.graph.execution.subgraphs for st in sg.device_graph.steps]
    tanhs = [st.kernel_name for st in steps if st.node.op_type == "Tanh"]
    # a Tanh whose input has another reader (the Relu) runs as an op of its own, natively where built
    assert tanhs == (["native" if native.available() else "fast"] if reread else [])
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, w in zip(got, want):
        # float32 sums of at most 27 products, then tanh (a few ulp, and a contraction by at most 1)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(w).max())))
