"""fold_pad_into_consumers (optimizer/pad_fold.py): which Pads fold into a Conv / pool's pads and which must
not, the graph after the pass, and the outputs against onnxruntime on both plan paths."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.conformance.tolerance import assert_within_bound, gamma
from nnhal.optimizer.pad_fold import fold_pad_into_consumers
from tests.optimizer.test_movement import _prepared_without_pass

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (pip install -e '.[test]')")

RNG = np.random.default_rng(27)


def _model(nodes, inits, x_shape, outs, opset=17) -> onnx.ModelProto:
    outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, [None] * len(x_shape)) for o in outs]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)], outputs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _pad(pads, opset=17, value=None, mode="constant", axes=None):
    """A Pad node of x -> p in the form of ``opset`` and the initializers it needs."""
    if opset < 11:
        attrs = {"pads": pads, "mode": mode}
        if value is not None:
            attrs["value"] = value
        return helper.make_node("Pad", ["x"], ["p"], **attrs), {}
    inits = {"pads": np.array(pads, np.int64)}
    inputs = ["x", "pads"]
    if value is not None or axes is not None:
        inputs.append("value" if value is not None else "")
        if value is not None:
            inits["value"] = np.array(value, np.float32)
    if axes is not None:
        inputs.append("axes")
        inits["axes"] = np.array(axes, np.int64)
    return helper.make_node("Pad", inputs, ["p"], mode=mode), inits


def _conv(x="p", out="y", c=3, m=4, k=3, **attrs):
    w = (RNG.standard_normal((m, c, k, k)) * 0.3).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    node = helper.make_node("Conv", [x, f"w_{out}", f"b_{out}"], [out], **attrs)
    return node, {f"w_{out}": w, f"b_{out}": b}


def _run_both(model, feeds, monkeypatch) -> list[list[np.ndarray]]:
    results = []
    for check in ("1", "0"):
        monkeypatch.setenv("NNHAL_CHECK", check)
        with nnhal.Session(model, devices=["cpu"], num_thread=1) as s:
            results.append(s.run(feeds))
    return results


def _against_ort(model, feeds, monkeypatch, k: int = 27):
    """Both plan paths against onnxruntime, within the rounding of two sums of ``k`` products (each bounded
    by the largest input times the largest weight, taken as 1 for a pool) in any order."""
    weights = [numpy_helper.to_array(t) for t in model.graph.initializer if t.data_type == TensorProto.FLOAT]
    w_max = max([1.0] + [float(np.abs(w).max()) for w in weights if w.size])
    bound = 2 * gamma(k + 1) * (k * float(np.abs(feeds["x"]).max()) * w_max + w_max)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for got in _run_both(model, feeds, monkeypatch):
        for g, w in zip(got, want):
            assert g.shape == w.shape
            assert_within_bound(g, w, bound)


def _folded(model, feeds) -> tuple[int, list[str]]:
    graph = _prepared_without_pass(model, feeds)
    n = fold_pad_into_consumers(graph)
    return n, [node.op_type for node in graph.nodes]


@pytest.mark.parametrize("opset", [2, 11, 18])
def test_zero_pad_folds_into_conv(opset, monkeypatch):
    pad, inits = _pad([0, 0, 1, 2, 0, 0, 1, 0], opset=opset if opset != 2 else 10, value=0.0 if opset > 2 else None)
    conv, w = _conv(pads=[1, 0, 0, 1])
    model = _model([pad, conv], {**inits, **w}, [1, 3, 7, 6], ["y"], opset=opset if opset != 2 else 10)
    feeds = {"x": RNG.standard_normal((1, 3, 7, 6)).astype(np.float32)}
    assert _folded(model, feeds) == (1, ["Conv"])
    _against_ort(model, feeds, monkeypatch)


def test_opset18_axes_input_folds(monkeypatch):
    pad, inits = _pad([2, 0], opset=18, axes=[-1])          # causal Conv1d padding, axes counted from the end
    w = (RNG.standard_normal((5, 3, 3)) * 0.3).astype(np.float32)
    conv = helper.make_node("Conv", ["p", "w"], ["y"], dilations=[2])
    model = _model([pad, conv], {**inits, "w": w}, [1, 3, 11], ["y"], opset=18)
    feeds = {"x": RNG.standard_normal((1, 3, 11)).astype(np.float32)}
    assert _folded(model, feeds) == (1, ["Conv"])
    _against_ort(model, feeds, monkeypatch, k=9)


@pytest.mark.parametrize("case, pads, value, mode", [
    ("negative", [0, 0, -1, 1, 0, 0, 1, 1], 0.0, "constant"),
    ("non-zero value", [0, 0, 1, 1, 0, 0, 1, 1], 0.5, "constant"),
    ("channel axis", [0, 1, 1, 1, 0, 0, 1, 1], 0.0, "constant"),
    ("batch axis", [1, 0, 1, 1, 0, 0, 1, 1], 0.0, "constant"),
    ("reflect", [0, 0, 1, 1, 0, 0, 1, 1], None, "reflect"),
])
def test_pads_that_must_not_fold(case, pads, value, mode, monkeypatch):
    pad, inits = _pad(pads, value=value, mode=mode)
    channels = 3 + pads[1] + pads[5]
    conv, w = _conv(c=channels)
    model = _model([pad, conv], {**inits, **w}, [1, 3, 6, 6], ["y"])
    feeds = {"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    assert _folded(model, feeds) == (0, ["Pad", "Conv"]), case
    _against_ort(model, feeds, monkeypatch)


def test_pad_with_two_consumers_folds_where_it_can(monkeypatch):
    pad, inits = _pad([0, 0, 1, 1, 0, 0, 1, 1])
    conv, w = _conv(out="y")
    relu = helper.make_node("Relu", ["p"], ["r"])
    model = _model([pad, conv, relu], {**inits, **w}, [1, 3, 5, 5], ["y", "r"])
    feeds = {"x": RNG.standard_normal((1, 3, 5, 5)).astype(np.float32)}
    assert _folded(model, feeds) == (1, ["Pad", "Conv", "Relu"])
    _against_ort(model, feeds, monkeypatch)


def test_pad_read_by_two_convs_goes(monkeypatch):
    pad, inits = _pad([0, 0, 1, 1, 0, 0, 1, 1])
    c1, w1 = _conv(out="y1")
    c2, w2 = _conv(out="y2", strides=[2, 2])
    model = _model([pad, c1, c2], {**inits, **w1, **w2}, [1, 3, 6, 6], ["y1", "y2"])
    feeds = {"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    assert _folded(model, feeds) == (2, ["Conv", "Conv"])
    _against_ort(model, feeds, monkeypatch)


def test_pad_that_is_a_graph_output_stays(monkeypatch):
    pad, inits = _pad([0, 0, 1, 1, 0, 0, 1, 1])
    conv, w = _conv()
    model = _model([pad, conv], {**inits, **w}, [1, 3, 5, 5], ["y", "p"])
    feeds = {"x": RNG.standard_normal((1, 3, 5, 5)).astype(np.float32)}
    assert _folded(model, feeds) == (1, ["Pad", "Conv"])
    _against_ort(model, feeds, monkeypatch)


@pytest.mark.parametrize("attrs, folds", [
    ({"count_include_pad": 1}, True),
    ({"count_include_pad": 0}, True),                          # no pads of its own: every window is full
    ({"count_include_pad": 0, "pads": [1, 0, 0, 0]}, False),   # its own pads would not count, the Pad's would
    ({"count_include_pad": 1, "ceil_mode": 1, "strides": [2, 2]}, False),
])
def test_average_pool(attrs, folds, monkeypatch):
    pad, inits = _pad([0, 0, 1, 0, 0, 0, 0, 1])
    pool = helper.make_node("AveragePool", ["p"], ["y"], kernel_shape=[3, 3], **attrs)
    model = _model([pad, pool], inits, [1, 2, 6, 7], ["y"])
    feeds = {"x": RNG.standard_normal((1, 2, 6, 7)).astype(np.float32)}
    assert _folded(model, feeds)[1] == (["AveragePool"] if folds else ["Pad", "AveragePool"])
    _against_ort(model, feeds, monkeypatch, k=9)


@pytest.mark.parametrize("value, folds", [(-np.inf, True), (0.0, False)])
def test_max_pool_folds_only_minus_infinity(value, folds, monkeypatch):
    pad, inits = _pad([0, 0, 1, 1, 0, 0, 1, 1], value=value)
    pool = helper.make_node("MaxPool", ["p"], ["y"], kernel_shape=[3, 3], strides=[2, 2])
    model = _model([pad, pool], inits, [1, 2, 6, 6], ["y"])
    feeds = {"x": RNG.standard_normal((1, 2, 6, 6)).astype(np.float32) - 3.0}     # negative: a 0 pad would show
    assert _folded(model, feeds)[1] == (["MaxPool"] if folds else ["Pad", "MaxPool"])
    _against_ort(model, feeds, monkeypatch)
