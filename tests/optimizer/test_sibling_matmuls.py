"""merge_row_projections (optimizer/sibling_matmuls.py): a row's products by constant matrices become one
product and a Split. Graphs before and after the pass, outputs against onnxruntime within the products'
rounding bound."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.conformance.tolerance import assert_within_bound, matmul_bound
from nnhal.optimizer.sibling_matmuls import merge_row_projections
from tests.optimizer.test_movement import _prepared_without_pass

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (pip install -e '.[test]')")

RNG = np.random.default_rng(27)
EPS = float(np.finfo(np.float32).eps)


def _f32(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _model(x_shape: tuple, widths: list[int], bias: str = "after", extra: str | None = None,
           opset: int = 17) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x (x_shape) times one constant (K, width) matrix per width, each + a constant bias (``bias``: "after"
    the product, "before" it in the Add, or "none"), each part through a Relu into its own graph output.
    ``extra``: "output": the first product is also a graph output; "reader": the first product is also read by
    a Neg into a graph output. Returns the model and the weights (w0, b0, w1, ...)."""
    k = x_shape[-1]
    nodes, inits, outs, consts = [], [], [], {}
    for i, n in enumerate(widths):
        w, b = _f32(k, n), _f32(n)
        consts[f"w{i}"], consts[f"b{i}"] = w, b
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("MatMul", ["x", f"w{i}"], [f"p{i}"], name=f"mm{i}"))
        part = f"p{i}"
        if bias != "none":
            ins = [part, f"b{i}"] if bias == "after" else [f"b{i}", part]
            nodes.append(helper.make_node("Add", ins, [f"a{i}"], name=f"add{i}"))
            part = f"a{i}"
        nodes.append(helper.make_node("Relu", [part], [f"y{i}"], name=f"relu{i}"))
        outs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, list(x_shape[:-1]) + [n]))
    if extra == "output":
        outs.append(helper.make_tensor_value_info("p0", TensorProto.FLOAT, list(x_shape[:-1]) + [widths[0]]))
    elif extra == "reader":
        nodes.append(helper.make_node("Neg", ["p0"], ["neg"], name="neg"))
        outs.append(helper.make_tensor_value_info("neg", TensorProto.FLOAT, list(x_shape[:-1]) + [widths[0]]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model, consts


def _check(model: onnx.ModelProto, consts: dict, x: np.ndarray, widths: list[int], bias: bool) -> None:
    """nnhal's outputs against onnxruntime's: each part within twice the product's rounding bound (both
    engines sum K terms in float32, in their own orders) plus the bias add's and Relu's rounding."""
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = nnhal.Session(model, devices=["cpu"], num_thread=2).run({"x": x})
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        weight = consts[f"w{min(i, len(widths) - 1)}"]
        bound = 2 * matmul_bound(x, weight) + 2 * EPS * np.abs(w.astype(np.float64))
        if bias:
            bound = bound + 2 * EPS * np.abs(consts[f"b{min(i, len(widths) - 1)}"])
        assert g.shape == w.shape
        assert_within_bound(g, w, bound)


@pytest.mark.parametrize("bias", ["after", "before", "none"])
def test_qkv_of_a_row_become_one_product_and_a_split(bias):
    widths = [64, 64, 64]
    model, consts = _model((1, 1, 48), widths, bias)
    x = _f32(1, 1, 48)
    graph = _prepared_without_pass(model, {"x": x})
    assert merge_row_projections(graph) == 2
    ops = [n.op_type for n in graph.nodes]
    assert ops == ["MatMul"] + (["Add"] if bias != "none" else []) + ["Split", "Relu", "Relu", "Relu"]
    merged = graph.tensors[graph.nodes[0].inputs[1]].value
    np.testing.assert_array_equal(merged, np.concatenate([consts[f"w{i}"] for i in range(3)], axis=1))
    # the separate weights and biases are gone from the graph
    assert not {"w0", "w1", "w2"} & set(graph.tensors)
    if bias != "none":
        assert not {"b0", "b1", "b2"} & set(graph.tensors)
    _check(model, consts, x, widths, bias != "none")


def test_unequal_widths_grouped_query_projections():
    """Grouped-query attention: K and V narrower than Q; the Split's parts are of three widths."""
    widths = [64, 16, 16]
    model, consts = _model((1, 32), widths)
    x = _f32(1, 32)
    graph = _prepared_without_pass(model, {"x": x})
    assert merge_row_projections(graph) == 2
    _check(model, consts, x, widths, True)


def test_opset_11_split_attribute():
    widths = [8, 8]
    model, consts = _model((1, 1, 16), widths, opset=11)
    x = _f32(1, 1, 16)
    graph = _prepared_without_pass(model, {"x": x})
    assert merge_row_projections(graph) == 1
    split = next(n for n in graph.nodes if n.op_type == "Split")
    assert len(split.outputs) == 2
    _check(model, consts, x, widths, True)


@pytest.mark.parametrize("shape", [(1, 3, 48), (2, 1, 48), (2, 48)])
def test_more_than_one_row_is_not_merged(shape):
    """A prompt (3 tokens) or a batch of 2: the parts would be strided, a copy each, so no merge."""
    widths = [32, 32, 32]
    model, consts = _model(shape, widths)
    x = _f32(*shape)
    graph = _prepared_without_pass(model, {"x": x})
    assert merge_row_projections(graph) == 0
    assert [n.op_type for n in graph.nodes].count("MatMul") == 3
    _check(model, consts, x, widths, True)


def test_product_that_is_a_graph_output_keeps_its_node():
    widths = [32, 32, 32]
    model, consts = _model((1, 1, 24), widths, extra="output")
    x = _f32(1, 1, 24)
    graph = _prepared_without_pass(model, {"x": x})
    assert merge_row_projections(graph) == 1          # the other two merge
    assert [n.op_type for n in graph.nodes].count("MatMul") == 2
    _check(model, consts, x, widths, True)


def test_product_with_another_reader_merges_without_its_bias():
    """The first product is also read by a Neg: its Add cannot fold into the merged one, so it is a member of
    no bias group (alone) and stays; the two others merge with their biases."""
    widths = [32, 32, 32]
    model, consts = _model((1, 1, 24), widths, extra="reader")
    x = _f32(1, 1, 24)
    graph = _prepared_without_pass(model, {"x": x})
    assert merge_row_projections(graph) == 1
    assert [n.op_type for n in graph.nodes].count("Add") == 2      # the merged bias and the first's own
    _check(model, consts, x, widths, True)


def test_quantized_precision_does_not_merge():
    from nnhal.optimizer.passes import FLOAT_ONLY

    assert "merge_row_projections" in FLOAT_ONLY


def test_decoder_step_with_kv_cache_against_onnxruntime():
    """A GPT block's attention for one new token: Q/K/V projections of the row, heads split by Reshape and
    Transpose, K/V appended to the cache by Concat, scaled scores, Softmax, output projection; the cache grows
    as graph outputs. The merged projections feed the fused attention."""
    d, heads, past = 32, 4, 6
    hd = d // heads
    ws = {n: _f32(d, d) * 0.2 for n in ("wq", "wk", "wv", "wo")}
    bs = {n: _f32(d) * 0.1 for n in ("bq", "bk", "bv")}
    inits = [numpy_helper.from_array(v, n) for n, v in {**ws, **bs}.items()]
    inits += [numpy_helper.from_array(np.array([1, 1, heads, hd], np.int64), "heads"),
              numpy_helper.from_array(np.array([1, 1, d], np.int64), "flat"),
              numpy_helper.from_array(np.array(np.sqrt(hd), np.float32), "scale")]
    nodes = []
    for p in "qkv":
        nodes += [helper.make_node("MatMul", ["x", f"w{p}"], [f"{p}0"]),
                  helper.make_node("Add", [f"b{p}", f"{p}0"], [f"{p}1"]),
                  helper.make_node("Reshape", [f"{p}1", "heads"], [f"{p}2"]),
                  helper.make_node("Transpose", [f"{p}2"], [f"{p}3"], perm=[0, 2, 1, 3])]
    nodes += [helper.make_node("Concat", ["past_k", "k3"], ["present_k"], axis=2),
              helper.make_node("Concat", ["past_v", "v3"], ["present_v"], axis=2),
              helper.make_node("Transpose", ["present_k"], ["kt"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["q3", "kt"], ["s0"]),
              helper.make_node("Div", ["s0", "scale"], ["s1"]),
              helper.make_node("Softmax", ["s1"], ["s2"], axis=-1),
              helper.make_node("MatMul", ["s2", "present_v"], ["o0"]),
              helper.make_node("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["o1", "flat"], ["o2"]),
              helper.make_node("MatMul", ["o2", "wo"], ["y"])]
    cache = [1, heads, past, hd]
    grown = [1, heads, past + 1, hd]
    graph = helper.make_graph(
        nodes, "step",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, d]),
         helper.make_tensor_value_info("past_k", TensorProto.FLOAT, cache),
         helper.make_tensor_value_info("past_v", TensorProto.FLOAT, cache)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, d]),
         helper.make_tensor_value_info("present_k", TensorProto.FLOAT, grown),
         helper.make_tensor_value_info("present_v", TensorProto.FLOAT, grown)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    feeds = {"x": _f32(1, 1, d), "past_k": _f32(*cache), "past_v": _f32(*cache)}
    assert merge_row_projections(_prepared_without_pass(model, feeds)) == 2
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = nnhal.Session(model, devices=["cpu"], num_thread=2).run(feeds)
    # the cache parts are products of the row plus a bias: twice the product's bound and the bias add's rounding
    for g, w, p in zip(got[1:], want[1:], "kv"):
        new = 2 * matmul_bound(feeds["x"], ws[f"w{p}"]) + 2 * EPS * (np.abs(bs[f"b{p}"]) + 1)
        bound = np.concatenate([np.zeros(cache), new.reshape(1, 1, heads, hd).transpose(0, 2, 1, 3)], axis=2)
        assert_within_bound(g, w, bound)
    # y: the projections' error (1e-6 relative) through scores, softmax and two more products of 8 and 32 terms:
    # bounded by 1e-4 of y's magnitude for these unit-scale values (float32 throughout, 4 reductions deep)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4 * float(np.max(np.abs(want[0]))))
