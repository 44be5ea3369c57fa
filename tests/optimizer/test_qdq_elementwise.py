"""Static QDQ graphs (optimizer/qdq.py fuse_qdq_elementwise): DQ, DQ -> Add / Mul -> Q becomes QLinearAdd /
QLinearMul and the element-wise chains after it lookup tables; results equal onnx.reference on both plan paths,
including a DequantizeLinear read by two consumers and a computed scale (not fused)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal

U8 = TensorProto.UINT8


def _model(op, live_scale=False, shared_dq=False):
    """a, b uint8 -> DQ, DQ -> op -> Q -> DQ -> Relu -> Q -> y; ``shared_dq``: DQ(a) also feeds a float output;
    ``live_scale``: b's scale is a graph input."""
    inits = {"sa": np.array(0.04, np.float32), "za": np.array(120, np.uint8), "sb": np.array(0.03, np.float32),
             "zb": np.array(131, np.uint8), "sy": np.array(0.05, np.float32), "zy": np.array(128, np.uint8),
             "sr": np.array(0.02, np.float32), "zr": np.array(0, np.uint8)}
    inputs = [helper.make_tensor_value_info(n, U8, [2, 3, 5]) for n in ("a", "b")]
    if live_scale:
        del inits["sb"]
        inputs.append(helper.make_tensor_value_info("sb", TensorProto.FLOAT, []))
    nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["af"]),
             helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bf"]),
             helper.make_node(op, ["af", "bf"], ["s"]),
             helper.make_node("QuantizeLinear", ["s", "sy", "zy"], ["sq"]),
             helper.make_node("DequantizeLinear", ["sq", "sy", "zy"], ["sf"]),
             helper.make_node("Relu", ["sf"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "sr", "zr"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", U8, None)]
    if shared_dq:
        nodes.append(helper.make_node("Neg", ["af"], ["neg"]))
        outputs.append(helper.make_tensor_value_info("neg", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


def _run(model, feeds, check, monkeypatch):
    monkeypatch.setenv("NNHAL_CHECK", check)
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run(feeds)
        steps = [st for sg in s.graph.execution.subgraphs for st in sg.device_graph.steps]
    # the cpu plan composes a CodeTable that alone reads a QLinearAdd / QLinearMul into its table (table+tail)
    ops = [op for st in steps for op in ((st.node.op_type, "CodeTable") if st.kernel_name == "table+tail"
                                         else (st.node.op_type,))]
    return got, ops


@pytest.mark.parametrize("check", ["0", "1"])
@pytest.mark.parametrize("shared_dq", [False, True])
@pytest.mark.parametrize("op", ["Add", "Mul"])
def test_qdq_add_and_mul_become_integer_ops_and_tables(op, shared_dq, check, monkeypatch):
    rng = np.random.default_rng(3)
    feeds = {n: rng.integers(0, 256, (2, 3, 5), dtype=np.uint8) for n in "ab"}
    model = _model(op, shared_dq=shared_dq)
    got, ops = _run(model, feeds, check, monkeypatch)
    assert f"QLinear{op}" in ops and "CodeTable" in ops and "Relu" not in ops and op not in ops, ops
    want = ReferenceEvaluator(model).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_a_computed_scale_is_not_fused_and_stays_correct(monkeypatch):
    rng = np.random.default_rng(4)
    feeds = {n: rng.integers(0, 256, (2, 3, 5), dtype=np.uint8) for n in "ab"}
    feeds["sb"] = np.array(0.03, np.float32)
    model = _model("Add", live_scale=True)
    got, ops = _run(model, feeds, "0", monkeypatch)
    assert "QLinearAdd" not in ops and "Add" in ops, ops
    want = ReferenceEvaluator(model).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def _movement_model(dtype, q_scale=0.04, shared=False):
    """x -> DQ -> Transpose -> Q -> DQ -> Reshape -> Q -> y (scale 0.04 and one zero point throughout; the last
    Q's scale ``q_scale``); ``shared``: the first DQ also feeds a float output."""
    elem = U8 if dtype == np.uint8 else TensorProto.INT8
    zero = np.array(131 if dtype == np.uint8 else -5, dtype)
    inits = {"s": np.array(0.04, np.float32), "z": zero, "s2": np.array(0.04, np.float32), "z2": zero.copy(),
             "sq": np.array(q_scale, np.float32), "shape": np.array([6, -1], np.int64)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xf"]),
             helper.make_node("Transpose", ["xf"], ["t"], perm=[0, 2, 1]),
             helper.make_node("QuantizeLinear", ["t", "s2", "z2"], ["tq"]),      # equal values, other tensors
             helper.make_node("DequantizeLinear", ["tq", "s", "z"], ["tf"]),
             helper.make_node("Reshape", ["tf", "shape"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "sq", "z"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", elem, None)]
    if shared:
        nodes.append(helper.make_node("Neg", ["xf"], ["neg"]))
        outputs.append(helper.make_tensor_value_info("neg", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem, [2, 3, 5])], outputs,
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


@pytest.mark.parametrize("check", ["0", "1"])
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_movement_between_equal_qdq_parameters_runs_on_the_codes(dtype, shared, check, monkeypatch):
    info = np.iinfo(dtype)
    # every code, including both ends of the range
    feeds = {"x": np.resize(np.arange(info.min, info.max + 1, dtype=np.int64), 30).astype(dtype).reshape(2, 3, 5)}
    model = _movement_model(dtype, shared=shared)
    got, ops = _run(model, feeds, check, monkeypatch)
    assert "QuantizeLinear" not in ops and ops.count("DequantizeLinear") == int(shared), ops
    want = ReferenceEvaluator(model).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_movement_between_other_parameters_keeps_its_qdq(monkeypatch):
    feeds = {"x": np.random.default_rng(5).integers(0, 256, (2, 3, 5), dtype=np.uint8)}
    model = _movement_model(np.uint8, q_scale=0.05)
    got, ops = _run(model, feeds, "0", monkeypatch)
    assert ops.count("QuantizeLinear") == 1 and "Reshape" in ops, ops
    np.testing.assert_array_equal(got[0], ReferenceEvaluator(model).run(None, feeds)[0])
