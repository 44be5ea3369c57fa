"""ONNX import: external-data weights, initializers listed as inputs, Constant nodes, bad models."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.serializer import load_onnx
from tests.conftest import make_model, vinfo


def _gemm_model(opset: int = 17, inits_as_inputs: bool = False) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(64 * 32, dtype=np.float32).reshape(64, 32) / 1000, "w")
    inputs = [vinfo("x", [2, 64])] + ([vinfo("w", [64, 32])] if inits_as_inputs else [])
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g", inputs,
                              [vinfo("y", [2, 32])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 3 if inits_as_inputs else 8
    return model


def _expected(x):
    return x @ (np.arange(64 * 32, dtype=np.float32).reshape(64, 32) / 1000)


def test_external_data_weights(tmp_path):
    model = _gemm_model()
    path = tmp_path / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").stat().st_size == 64 * 32 * 4
    x = np.ones((2, 64), np.float32)
    with nnhal.Session(str(path)) as s:
        np.testing.assert_allclose(s.run({"x": x})[0], _expected(x), rtol=1e-6)


def test_initializers_listed_as_inputs_stay_constants():
    graph = load_onnx(_gemm_model(opset=7, inits_as_inputs=True))
    assert graph.inputs == ["x"] and graph.tensors["w"].is_constant


def test_constant_nodes_become_constants():
    model = make_model([helper.make_node("Constant", [], ["c"], value_floats=[1.0, 2.0]),
                        helper.make_node("Add", ["x", "c"], ["y"])], [vinfo("x", [2])], [vinfo("y", [2])])
    graph = load_onnx(model)
    assert [n.op_type for n in graph.nodes] == ["Add"] and graph.tensors["c"].is_constant


def test_every_opset_from_7_imports():
    for opset in (7, 9, 11, 13, 17, onnx.defs.onnx_opset_version()):
        x = np.ones((2, 64), np.float32)
        with nnhal.Session(_gemm_model(opset)) as s:
            np.testing.assert_allclose(s.run({"x": x})[0], _expected(x), rtol=1e-6)


def test_unsupported_element_type_is_reported():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [vinfo("x", [2], TensorProto.BFLOAT16)],
                       [vinfo("y", [2], TensorProto.BFLOAT16)])
    with pytest.raises(nnhal.UnsupportedTypeError, match="graph value 'x' has element type BFLOAT16"):
        load_onnx(model)


def test_graph_with_a_cycle_or_dangling_input_is_a_model_error():
    graph = helper.make_graph([helper.make_node("Relu", ["missing"], ["y"], name="r")], "g", [vinfo("x", [2])],
                              [vinfo("y", [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(nnhal.ModelError, match="node 'r' \\(Relu\\) reads 'missing', which no node, input or "
                                               "initializer"):
        load_onnx(model)
