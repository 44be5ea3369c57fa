"""com.microsoft DynamicQuantizeLSTM (what onnxruntime's quantize_dynamic writes for an LSTM): loads, runs on
the fast and the reference kernels, and matches the float LSTM of its dequantized weights and onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.hostkernels.ms_dynamic_quantize_lstm import dequantize

ort = pytest.importorskip("onnxruntime", reason="the model is quantized by onnxruntime's quantize_dynamic")
T, B, N_IN, H = 6, 1, 12, 16


def _quantized(tmp_path, direction: str) -> tuple[onnx.ModelProto, dict]:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(5)
    d = 2 if direction == "bidirectional" else 1
    inits = [numpy_helper.from_array((rng.standard_normal((d, 4 * H, N_IN)) * 0.3).astype(np.float32), "W"),
             numpy_helper.from_array((rng.standard_normal((d, 4 * H, H)) * 0.3).astype(np.float32), "R"),
             numpy_helper.from_array((rng.standard_normal((d, 8 * H)) * 0.1).astype(np.float32), "B")]
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Yh", "Yc"], hidden_size=H, direction=direction)
    graph = helper.make_graph([node], "lstm", [helper.make_tensor_value_info("X", TensorProto.FLOAT, (T, B, N_IN))],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("Y", "Yh", "Yc")],
                              inits)
    src, dst = tmp_path / "lstm.onnx", tmp_path / "lstm_dq.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), src)
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, op_types_to_quantize=["LSTM"])
    model = onnx.load(dst)
    assert [n.op_type for n in model.graph.node if n.domain == "com.microsoft"] == ["DynamicQuantizeLSTM"]
    return model, {"X": rng.standard_normal((T, B, N_IN)).astype(np.float32)}


def _float_twin(model: onnx.ModelProto) -> onnx.ModelProto:
    """The plain LSTM over the quantized node's dequantized weights."""
    node = next(n for n in model.graph.node if n.op_type == "DynamicQuantizeLSTM")
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    w = dequantize(values[node.input[1]], values[node.input[8]], values[node.input[9]])
    r = dequantize(values[node.input[2]], values[node.input[10]], values[node.input[11]])
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()}
    lstm = helper.make_node("LSTM", [node.input[0], "Wf", "Rf", node.input[3]], list(node.output), **attrs)
    graph = helper.make_graph([lstm], "twin", list(model.graph.input), list(model.graph.output),
                              [numpy_helper.from_array(w, "Wf"), numpy_helper.from_array(r, "Rf"),
                               numpy_helper.from_array(values[node.input[3]], node.input[3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("kernel", ["fast", "reference"])
def test_dynamic_quantize_lstm_loads_and_runs(tmp_path, monkeypatch, direction, kernel):
    model, feeds = _quantized(tmp_path, direction)
    twin = ReferenceEvaluator(_float_twin(model)).run(None, feeds)
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    if kernel == "reference":
        monkeypatch.setenv("NNHAL_CPU_REFERENCE", "1")     # read when the session prepares (first run)
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run(feeds)
        assert s.subgraphs[0].stats["kernels"][s.subgraphs[0].nodes[0].name] == kernel
    # against the float LSTM of the same (dequantized) weights: float32 rounding only (dot products of
    # N_IN + H + 2 terms of |w x| < 4 per step, T steps of a contracting recurrence)
    for g, w in zip(got, twin):
        np.testing.assert_allclose(g, w, rtol=0, atol=T * (N_IN + H + 8) * 4 * 2.0 ** -23)
    # onnxruntime also rounds X and h to 8 bits before each product: a pre-activation moves by at most
    # sum_k |w_k| * step / 2 for each rounded operand (X's step: its range / 255; h in [-1, 1]: 2 / 255); the
    # gates are 1-Lipschitz and the recurrence contracting, so T steps move an output by at most T times that
    w = np.abs(dequantize(*(numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == n))
                            for n in (model.graph.node[0].input[i] for i in (1, 8, 9)))))
    r = np.abs(dequantize(*(numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == n))
                            for n in (model.graph.node[0].input[i] for i in (2, 10, 11)))))
    x = feeds["X"]
    step_x = (max(x.max(), 0) - min(x.min(), 0)) / 255
    bound = T * (w.sum(-1).max() * step_x / 2 + r.sum(-1).max() * (2 / 255) / 2)
    for g, o in zip(got, theirs):
        assert np.max(np.abs(g - o)) <= bound
