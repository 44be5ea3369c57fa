"""fold_constant_adds and split_matmul_batch (optimizer/constant_adds.py): graphs before and after, outputs
against onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

from nnhal.optimizer.constant_adds import fold_constant_adds, split_matmul_batch
from tests.optimizer.test_movement import Builder, _check, _prepared_without_pass

pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (pip install -e '.[test]')")

RNG = np.random.default_rng(11)


def _f32(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _bias_and_mask(b: Builder, x: str, batch: int) -> str:
    """Swin's scores: + relative position bias (heads, N, N), viewed per window, + mask (windows, N, N)."""
    x = b.op("Add", [x, b.const(_f32(1, 3, 4, 4), np.float32)])
    x = b.op("Reshape", [x, b.const([batch, 2, 3, 4, 4])])
    mask = np.where(RNG.random((1, 2, 1, 4, 4)) < 0.5, -100.0, 0.0).astype(np.float32)
    x = b.op("Add", [x, b.const(mask, np.float32)])
    return b.op("Reshape", [x, b.const([batch * 2, 3, 4, 4])])


def test_bias_and_mask_become_one_constant():
    b = Builder()
    y = b.op("Softmax", [_bias_and_mask(b, "x", 2)], axis=-1)
    model = b.model([4, 3, 4, 4], y, [4, 3, 4, 4])
    feeds = {"x": _f32(4, 3, 4, 4)}
    graph = _prepared_without_pass(model, feeds)
    assert fold_constant_adds(graph) == 1
    assert [n.op_type for n in graph.nodes] == ["Reshape", "Add", "Reshape", "Softmax"]
    # the sum is kept in its smallest broadcasting form: one copy per window and head, not per image
    assert graph.tensors[graph.nodes[1].inputs[1]].value.shape == (1, 2, 3, 4, 4)
    _check(model, feeds, rtol=1e-5, atol=1e-6)       # softmax: its exp rounds unlike onnxruntime's


def test_two_adds_in_a_row_fold_without_a_reshape():
    b = Builder()
    y = b.op("Add", [b.const(_f32(5), np.float32), b.op("Add", ["x", b.const(_f32(3, 1), np.float32)])])
    model = b.model([2, 3, 5], y, [2, 3, 5])
    graph = _prepared_without_pass(model, {"x": _f32(2, 3, 5)})
    assert fold_constant_adds(graph) == 1
    (add,) = graph.nodes
    assert add.inputs[0] == "x" and graph.tensors[add.inputs[1]].value.shape == (1, 3, 5)
    _check(model, {"x": _f32(2, 3, 5)}, rtol=1e-6, atol=1e-6)


def test_an_intermediate_read_elsewhere_keeps_both_adds():
    b = Builder()
    first = b.op("Add", ["x", b.const(_f32(5), np.float32)])
    y = b.op("Mul", [b.op("Add", [first, b.const(_f32(5), np.float32)]), first])
    model = b.model([2, 5], y, [2, 5])
    graph = _prepared_without_pass(model, {"x": _f32(2, 5)})
    assert fold_constant_adds(graph) == 0
    assert [n.op_type for n in graph.nodes] == ["Add", "Add", "Mul"]


def test_the_mask_add_lands_next_to_the_scores_product():
    """After both passes the product itself has the per-window shape and one Add follows it."""
    b = Builder()
    scores = b.op("MatMul", ["x", b.op("Transpose", ["x"], perm=[0, 1, 3, 2])])
    y = b.op("Softmax", [_bias_and_mask(b, scores, 2)], axis=-1)
    model = b.model([4, 3, 4, 8], y, [4, 3, 4, 4])
    feeds = {"x": _f32(4, 3, 4, 8)}
    graph = _prepared_without_pass(model, feeds)
    assert fold_constant_adds(graph) == 1 and split_matmul_batch(graph) == 1
    ops = [n.op_type for n in graph.nodes]
    assert ops == ["Transpose", "Reshape", "Reshape", "MatMul", "Add", "Reshape", "Softmax"]
    matmul = graph.nodes[3]
    assert graph.tensors[matmul.outputs[0]].shape == (2, 2, 3, 4, 4)
    s = _check(model, feeds, rtol=1e-5, atol=1e-6)
    assert s.graph.pass_report["split_matmul_batch"] == 1


def test_a_matrix_operand_is_not_reshaped():
    b = Builder()
    y = b.op("Reshape", [b.op("MatMul", ["x", b.const(_f32(8, 5), np.float32)]), b.const([2, 3, 4, 5])])
    model = b.model([6, 4, 8], y, [2, 3, 4, 5])
    graph = _prepared_without_pass(model, {"x": _f32(6, 4, 8)})
    assert split_matmul_batch(graph) == 1
    assert [n.op_type for n in graph.nodes] == ["Reshape", "MatMul"]
    _check(model, {"x": _f32(6, 4, 8)}, rtol=1e-5, atol=1e-6)


def test_a_reshape_of_the_matrix_dimensions_stays():
    b = Builder()
    y = b.op("Reshape", [b.op("MatMul", ["x", b.const(_f32(8, 6), np.float32)]), b.const([6, 2, 12])])
    model = b.model([6, 4, 8], y, [6, 2, 12])
    graph = _prepared_without_pass(model, {"x": _f32(6, 4, 8)})
    assert split_matmul_batch(graph) == 0
    assert [n.op_type for n in graph.nodes] == ["MatMul", "Reshape"]


def test_quantized_precisions_keep_the_constants_apart():
    """A quantized Add quantizes its constant per tensor: a bias summed with a -100 mask would drown."""
    import nnhal

    b = Builder()
    y = b.op("Softmax", [_bias_and_mask(b, "x", 2)], axis=-1)
    model = b.model([4, 3, 4, 4], y, [4, 3, 4, 4])
    feeds = {"x": _f32(4, 3, 4, 4)}
    with nnhal.Session(model, devices=["cpu"], precision="int8") as s:
        s.run(feeds)
        assert "fold_constant_adds" not in s.graph.pass_report
    with nnhal.Session(model, devices=["cpu"]) as s:
        s.run(feeds)
        assert s.graph.pass_report["fold_constant_adds"] == 1
