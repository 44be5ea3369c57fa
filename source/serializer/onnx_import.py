"""ONNX import: ModelProto -> nnhal Graph.

Handles opsets 7 to the newest the installed onnx knows, initializers,
Constant nodes, external-data weights, old-IR models whose initializers are
also graph inputs, and nested graphs (If, Loop, Scan). Every unsupported
operator of the model is reported at once.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, numpy_helper

from nnhal.errors import ModelError, UnsupportedOperatorError, UnsupportedTypeError
from nnhal.graph.dtypes import to_numpy, type_name
from nnhal.graph.graph import Graph, bodies, free_names
from nnhal.graph.node import Node
from nnhal.graph.tensor import Tensor, TensorKind, constant
from nnhal.operator.table import get_prototype

# NOTE: opsets below 7 import too; an op whose prototype has no version for
# such an old opset is reported unsupported like any other.
MIN_OPSET = 1
MAX_OPSET = onnx.defs.onnx_opset_version()

ModelSource = str | os.PathLike | bytes | onnx.ModelProto


def read_model(source: ModelSource) -> onnx.ModelProto:
    """Load a ModelProto from a path, bytes or a ModelProto (external data resolved)."""
    if isinstance(source, onnx.ModelProto):
        return source
    try:
        if isinstance(source, (bytes, bytearray)):
            return onnx.load_from_string(bytes(source))
        path = Path(source)
        if not path.is_file():
            raise ModelError(f"model file '{path}' does not exist")
        return onnx.load(str(path), load_external_data=True)
    except ModelError:
        raise
    except Exception as exc:  # protobuf and file errors come in many types
        raise ModelError(f"cannot read ONNX model from {_label(source)}: {exc}") from exc


def load_onnx(source: ModelSource) -> Graph:
    """Import an ONNX model into a validated nnhal Graph."""
    model = read_model(source)
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    if "" not in opsets:
        opsets[""] = 1 if model.ir_version < 3 else MAX_OPSET
    if opsets[""] < MIN_OPSET:
        raise ModelError(f"model imports opset {opsets['']}; nnhal supports opsets {MIN_OPSET} to {MAX_OPSET}")
    if opsets[""] > MAX_OPSET:
        raise ModelError(f"model imports opset {opsets['']}, newer than the installed onnx knows ({MAX_OPSET}); upgrade onnx")
    unsupported: dict[tuple[str, int], str] = {}
    graph = _convert_graph(model.graph, opsets, frozenset(), unsupported)
    if unsupported:
        entries = [(op, opset, name) for (op, opset), name in unsupported.items()]
        listing = "; ".join(f"{op} (opset {opset}, first at node '{name}')" for op, opset, name in entries)
        raise UnsupportedOperatorError(
            f"the model uses {len(entries)} operator(s) nnhal does not support: {listing}", entries)
    _validate(graph)
    return graph


def _validate(graph: Graph) -> None:
    graph.sort_and_validate()
    for node in graph.nodes:
        for body in bodies(node):
            _validate(body)


def _convert_graph(gp: onnx.GraphProto, opsets: dict[str, int], outer: frozenset[str],
                   unsupported: dict[tuple[str, int], str]) -> Graph:
    tensors: dict[str, Tensor] = {}
    for init in gp.initializer:
        tensors[init.name] = constant(init.name, _tensor_value(init))
    if gp.sparse_initializer:
        raise ModelError(f"graph '{gp.name}' has sparse initializers, which nnhal does not support")
    inputs: list[str] = []
    for vi in gp.input:
        if vi.name in tensors:
            continue  # old IR: initializers are listed as inputs too; they stay constants
        dtype, shape = _value_type(vi)
        tensors[vi.name] = Tensor(vi.name, dtype, shape, TensorKind.INPUT)
        inputs.append(vi.name)
    nodes: list[Node] = []
    scope = outer | set(tensors)
    # NOTE: what a nested graph may read: computed once per graph (not per attribute: quadratic in nodes)
    body_scope = scope | {o for n in gp.node for o in n.output} if _has_graph_attribute(gp) else scope
    for i, np_ in enumerate(gp.node):
        name = np_.name or f"{np_.op_type}_{i}"
        domain = "" if np_.domain == "ai.onnx" else np_.domain
        opset = opsets.get(domain)
        proto = get_prototype(domain, np_.op_type)
        version = proto.version_for(opset) if (proto is not None and opset is not None) else None
        if version is None:
            unsupported.setdefault((f"{domain + '::' if domain else ''}{np_.op_type}", opset or 0), name)
            continue
        attrs = {a.name: _attribute(a, opsets, body_scope, unsupported) for a in np_.attribute}
        node = Node(name, np_.op_type, list(np_.input), list(np_.output), attrs, domain, opset, version)
        nested = bodies(node)
        if nested:
            node.implicit_inputs = sorted(set().union(*(free_names(b) for b in nested)))
        proto.normalize(node)
        if node.op_type == "Constant" and not domain:
            tensors[node.outputs[0]] = constant(node.outputs[0], proto.value(node))
            continue
        nodes.append(node)
        for out in node.outputs:
            if out and out not in tensors:
                tensors[out] = Tensor(out)
    for vi in gp.output:
        dtype, shape = _value_type(vi)
        if vi.name not in tensors:
            tensors[vi.name] = Tensor(vi.name, dtype, shape)
        elif tensors[vi.name].dtype is None and tensors[vi.name].kind is TensorKind.VARIABLE:
            # the declared type is a hint until inference sets the real one
            tensors[vi.name].dtype, tensors[vi.name].shape = dtype, shape
    return Graph(gp.name or "main", tensors, nodes, inputs, [o.name for o in gp.output], dict(opsets), outer)


def _has_graph_attribute(gp: onnx.GraphProto) -> bool:
    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for n in gp.node for a in n.attribute)


def _value_type(vi: onnx.ValueInfoProto) -> tuple[np.dtype | None, tuple | None]:
    kind = vi.type.WhichOneof("value")
    if kind is None:
        return None, None
    if kind != "tensor_type":
        raise UnsupportedTypeError(f"graph value '{vi.name}' has type {kind}; nnhal supports tensors only")
    tt = vi.type.tensor_type
    dtype = to_numpy(tt.elem_type)
    if dtype is None and tt.elem_type != 0:
        raise UnsupportedTypeError(f"graph value '{vi.name}' has element type {type_name(tt.elem_type)}, which nnhal does not support")
    if not tt.HasField("shape"):
        return dtype, None
    return dtype, tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)


def _tensor_value(tp: onnx.TensorProto) -> np.ndarray:
    if to_numpy(tp.data_type) is None:
        raise UnsupportedTypeError(f"tensor '{tp.name}' has element type {type_name(tp.data_type)}, which nnhal does not support")
    try:
        return numpy_helper.to_array(tp)
    except Exception as exc:
        raise ModelError(f"cannot read tensor '{tp.name}': {exc}") from exc


def _attribute(a: AttributeProto, opsets: dict[str, int], scope: frozenset[str] | set[str],
               unsupported: dict[tuple[str, int], str]) -> Any:
    t = a.type
    if t == AttributeProto.FLOAT:
        return float(a.f)
    if t == AttributeProto.INT:
        return int(a.i)
    if t == AttributeProto.STRING:
        return a.s.decode("utf-8", errors="replace")
    if t == AttributeProto.TENSOR:
        return _tensor_value(a.t)
    if t == AttributeProto.GRAPH:
        return _convert_graph(a.g, opsets, frozenset(scope), unsupported)
    if t == AttributeProto.FLOATS:
        return [float(x) for x in a.floats]
    if t == AttributeProto.INTS:
        return [int(x) for x in a.ints]
    if t == AttributeProto.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in a.strings]
    if t == AttributeProto.TENSORS:
        return [_tensor_value(x) for x in a.tensors]
    if t == AttributeProto.GRAPHS:
        return [_convert_graph(g, opsets, frozenset(scope), unsupported) for g in a.graphs]
    if t == AttributeProto.TYPE_PROTO:
        return a.tp
    raise ModelError(f"attribute '{a.name}' has type {AttributeProto.AttributeType.Name(t)}, which nnhal does not support")


def _label(source: ModelSource) -> str:
    return "bytes" if isinstance(source, (bytes, bytearray)) else f"'{source}'"
