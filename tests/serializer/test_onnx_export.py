"""The subgraph-to-ONNX export (nnhal.serializer.onnx_export, nnhal.testing.export_subgraph).

Round trip: every case of the ONNX backend node suite is imported, inferred (no folding, so the case's
nodes stay as they are) and exported as one subgraph; onnxruntime runs the exported model and must give
the case's expected outputs wherever it runs the case's own model correctly (so the test measures the
export, not onnxruntime's coverage).
"""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest

from nnhal.conformance.runner import _arrays, all_cases
from nnhal.conformance.tolerance import compare, policy
from nnhal.errors import NnhalError
from nnhal.graph.node import Node
from nnhal.graph.subgraph import Subgraph
from nnhal.operator.base import Info
from nnhal.optimizer.infer import infer_graph
from nnhal.serializer.onnx_export import export_node, export_subgraph, node_attributes
from nnhal.serializer.onnx_import import load_onnx

ort = pytest.importorskip("onnxruntime", reason="the round trip runs the exported models on onnxruntime")


def _feed_names(model: onnx.ModelProto) -> list[str]:
    """The names a case's data sets feed, in order (old-IR initializers listed as inputs are not fed)."""
    inits = {i.name for i in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def _ort_run(model: onnx.ModelProto, feeds: list[np.ndarray], names: list[str] | None = None) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = names or [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, feeds)))


def _matches(outputs, expected, case) -> str | None:
    tol = policy("fp32", case.atol, case.rtol)
    for i, (got, want) in enumerate(zip(outputs, expected)):
        why = compare(np.asarray(got), want, tol)
        if why:
            return f"output {i}: {why}"
    return None


CASES = {c.name: c for c in all_cases()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip_through_onnxruntime(name):
    case = CASES[name]
    try:
        graph = load_onnx(case.model)
        infer_graph(graph, fold=False)
    except NnhalError as exc:
        pytest.skip(f"nnhal does not import the case: {type(exc).__name__}")
    data = []
    for inputs, expected in case.data_sets:
        inputs, expected = _arrays(inputs), _arrays(expected)
        if inputs is None or expected is None:
            pytest.skip("sequence or optional values (no tensor boundary to export)")
        data.append((inputs, expected))
    for inputs, expected in data:
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                reference = _ort_run(case.model, inputs)
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own errors are untyped (Fail, NotImplemented)
            pytest.skip(f"onnxruntime does not run the case's own model: {str(exc)[:120]}")
        if _matches(reference, expected, case):
            pytest.skip("onnxruntime's result for the case's own model is outside the tolerance")
    sg = Subgraph(0, graph, list(graph.nodes), list(graph.inputs), list(graph.outputs), "cpu")
    exported = export_subgraph(sg)
    if all(v.type.tensor_type.HasField("shape") for v in [*exported.graph.input, *exported.graph.output]):
        # NOTE: the checker wants a shape on every graph input and output; a value-dependent one (known only
        # at run time, even its rank) has none, which onnxruntime accepts
        onnx.checker.check_model(exported, full_check=False)
    for inputs, expected in data:
        with np.errstate(all="ignore"):
            got = _ort_run(exported, inputs, _feed_names(case.model))
        why = _matches(got, expected, case)
        assert why is None, f"{name}: exported model differs: {why}"


def test_attributes_follow_the_nodes_own_opset():
    # nnhal's IR fills MaxPool's newest defaults (ceil_mode, dilations, storage_order); opset 9 has
    # storage_order but no ceil_mode, and a default equal to the schema's is left to the schema
    node = Node("pool", "MaxPool", ["x"], ["y"], {"kernel_shape": [2, 2], "ceil_mode": 0, "storage_order": 0,
                                                  "dilations": None, "auto_pad": "NOTSET", "pads": [1, 1, 1, 1],
                                                  "strides": [2, 2]}, opset=9, version=8)
    names = {a.name: a for a in node_attributes(node)}
    assert sorted(names) == ["kernel_shape", "pads", "strides"]
    assert names["kernel_shape"].type == onnx.AttributeProto.INTS
    node.opset, node.attrs["ceil_mode"] = 12, 1
    assert sorted(a.name for a in node_attributes(node)) == ["ceil_mode", "kernel_shape", "pads", "strides"]


def test_float_attribute_given_as_int_keeps_its_schema_type():
    node = Node("lr", "LeakyRelu", ["x"], ["y"], {"alpha": 1}, opset=16)
    (alpha,) = node_attributes(node)
    assert alpha.type == onnx.AttributeProto.FLOAT and alpha.f == 1.0


def test_export_node_makes_constant_inputs_initializers_and_imports_contrib_domains():
    x = Info(np.dtype(np.uint8), (1, 4))
    scale, zp = Info.of(np.float32(0.5)), Info.of(np.uint8(3))
    node = Node("sm", "QLinearSoftmax", ["x", "s", "z", "s", "z"], ["y"], {"axis": -1, "opset": 13},
                domain="com.microsoft", opset=1, version=1)
    model = export_node(node, [x, scale, zp, scale, zp], [Info(np.dtype(np.uint8), (1, 4))],
                        {"": 13, "com.microsoft": 1})
    assert [i.name for i in model.graph.input] == ["x"]
    assert sorted(i.name for i in model.graph.initializer) == ["s", "z"]
    assert {o.domain: o.version for o in model.opset_import} == {"": 13, "com.microsoft": 1}
    got = _ort_run(model, [np.arange(4, dtype=np.uint8).reshape(1, 4)])[0]
    assert got.shape == (1, 4) and got.dtype == np.uint8


def test_unknown_dims_become_symbolic():
    node = Node("r", "Relu", ["x"], ["y"], opset=14)
    model = export_node(node, [Info(np.dtype(np.float32), (None, 3))], [Info(np.dtype(np.float32), (None, 3))])
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param and dims[1].dim_value == 3
    assert _ort_run(model, [np.ones((5, 3), np.float32)])[0].shape == (5, 3)


def test_a_node_of_nnhals_own_domain_is_refused_by_name():
    from nnhal.errors import UnsupportedError

    node = Node("dq", "DynamicQuantizeGemm", ["x"], ["y"], domain="ai.nnhal", opset=1, version=1)
    with pytest.raises(UnsupportedError, match="'dq'.*ai.nnhal"):
        export_node(node, [Info(np.dtype(np.float32), (2, 2))], [Info(np.dtype(np.float32), (2, 2))])
