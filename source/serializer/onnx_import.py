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
from onnx import AttributeProto, helper, numpy_helper

from nnhal.errors import ModelError, UnsupportedOperatorError, UnsupportedTypeError
from nnhal.graph.dtypes import to_numpy, type_name
from nnhal.graph.graph import Graph, bodies, free_names
from nnhal.graph.node import Node
from nnhal.graph.tensor import Tensor, TensorKind, constant
from nnhal.operator.schema import check_required_inputs
from nnhal.operator.table import get_prototype
from nnhal.serializer import msexpand
from nnhal.serializer.external_data import is_external, read_external

# NOTE: opsets below 7 import too; an op whose prototype has no version for
# such an old opset is reported unsupported like any other.
MIN_OPSET = 1
MAX_OPSET = onnx.defs.onnx_opset_version()

ModelSource = str | os.PathLike | bytes | onnx.ModelProto


def read_model(source: ModelSource, base_dir: str | os.PathLike | None = None) -> tuple[onnx.ModelProto, str | None]:
    """Parse a path, bytes or a ModelProto; return it with the folder its external data live in.

    External data are never loaded here (see nnhal/serializer/external_data.py): a path's folder is
    where they resolve, unless ``base_dir`` names another; bytes and a ModelProto have no folder
    and resolve external data only under an explicit ``base_dir``.
    """
    folder = None if base_dir is None else os.fspath(base_dir)
    if isinstance(source, onnx.ModelProto):
        model = source
    elif isinstance(source, (bytes, bytearray, memoryview)):
        if len(source) == 0:
            raise ModelError("the model bytes are empty")
        model = _parse(bytes(source), "bytes")
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise ModelError(f"model file '{path}' does not exist")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ModelError(f"cannot read ONNX model file '{path}': {exc}") from exc
        if not data:
            raise ModelError(f"model file '{path}' is empty (0 bytes)")
        model = _parse(data, f"'{path}'")
        if folder is None:
            folder = str(path.resolve().parent)
    else:
        raise ModelError(f"a model is a path, bytes or an onnx.ModelProto; got {type(source).__name__}")
    if model.ByteSize() == 0:
        raise ModelError(f"the model from {_label(source)} is empty (an empty ModelProto)")
    if not model.HasField("graph"):
        raise ModelError(f"the model from {_label(source)} has no graph")
    if not model.graph.output:
        raise ModelError(f"the model's graph '{model.graph.name}' declares no outputs")
    return model, folder


def _parse(data: bytes, label: str) -> onnx.ModelProto:
    # NOTE: parsed here, not with onnx.load: onnx.load(path) would also resolve external data itself.
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as exc:  # protobuf's DecodeError and RuntimeError both occur
        raise ModelError(f"cannot read ONNX model from {label}: {exc}") from exc
    return model


def load_onnx(source: ModelSource, base_dir: str | os.PathLike | None = None) -> Graph:
    """Import an ONNX model into a validated nnhal Graph.

    ``base_dir`` is the folder external-data files resolve in: needed for bytes or a ModelProto
    with external data; for a path it defaults to the model file's folder.
    """
    model, folder = read_model(source, base_dir)
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    if "" not in opsets:
        opsets[""] = 1 if model.ir_version < 3 else MAX_OPSET
    if opsets[""] < MIN_OPSET:
        raise ModelError(f"model imports opset {opsets['']}; nnhal supports opsets {MIN_OPSET} to {MAX_OPSET}")
    if opsets[""] > MAX_OPSET:
        raise ModelError(f"model imports opset {opsets['']}, newer than the installed onnx knows ({MAX_OPSET}); "
                         "upgrade onnx")
    unsupported: dict[tuple[str, int], str] = {}
    graph = _convert_graph(model.graph, opsets, frozenset(), unsupported, folder)
    if unsupported:
        entries = [(op, opset, name) for (op, opset), name in unsupported.items()]
        listing = "; ".join(f"{op} (opset {opset}, first at node '{name}')" for op, opset, name in entries)
        raise UnsupportedOperatorError(
            f"the model uses {len(entries)} operator(s) nnhal does not support: {listing}", entries)
    _validate(graph)
    if _uses_external_data(model.graph):
        # NOTE: read by the compiled cache: a graph whose weights come from other files is never cached,
        # since its key (the model file's hash) would not cover them
        graph.external_data = True
    return graph


def _uses_external_data(gp: onnx.GraphProto) -> bool:
    """Whether any tensor of the graph or of a nested graph (initializers, tensor attributes) is external."""
    if any(is_external(t) for t in gp.initializer):
        return True
    for node in gp.node:
        for a in node.attribute:
            if (a.HasField("t") and is_external(a.t)) or any(is_external(t) for t in a.tensors):
                return True
            if any(_uses_external_data(g) for g in ([a.g] if a.HasField("g") else []) + list(a.graphs)):
                return True
    return False


def _validate(graph: Graph) -> None:
    graph.sort_and_validate()
    for node in graph.nodes:
        for body in bodies(node):
            _validate(body)


def _convert_graph(gp: onnx.GraphProto, opsets: dict[str, int], outer: frozenset[str],
                   unsupported: dict[tuple[str, int], str], folder: str | None) -> Graph:
    tensors: dict[str, Tensor] = {}
    for init in gp.initializer:
        tensors[init.name] = constant(init.name, _tensor_value(init, folder))
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
    for i, (np_, node_opset) in enumerate(_expanded_nodes(gp, opsets)):
        for field in (np_.name, np_.op_type, np_.domain):
            if not isinstance(field, str):      # protobuf hands back bytes that are not valid UTF-8
                raise ModelError(f"node {i} of graph '{gp.name}' has a name, op type or domain that is not UTF-8 "
                                 f"text: {field!r}")
        name = np_.name or f"{np_.op_type}_{i}"
        domain = "" if np_.domain == "ai.onnx" else np_.domain
        opset = node_opset or opsets.get(domain)
        proto = get_prototype(domain, np_.op_type)
        version = proto.version_for(opset) if (proto is not None and opset is not None) else None
        if version is None:
            unsupported.setdefault((f"{domain + '::' if domain else ''}{np_.op_type}", opset or 0), name)
            continue
        _check_attribute_types(np_, name, domain, opset)
        attrs = {a.name: _attribute(a, opsets, body_scope, unsupported, folder) for a in np_.attribute}
        node = Node(name, np_.op_type, list(np_.input), list(np_.output), attrs, domain, opset, version)
        nested = bodies(node)
        if nested:
            node.implicit_inputs = sorted(set().union(*(free_names(b) for b in nested)))
        proto.normalize(node)
        check_required_inputs(node)
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


def _expanded_nodes(gp: onnx.GraphProto, opsets: dict[str, int]) -> list[tuple[onnx.NodeProto, int | None]]:
    """The graph's nodes, each with None (its domain's model opset), with onnxruntime's fused float operators
    expanded into standard ones at the opset each is written at (nnhal.serializer.msexpand)."""
    def domain_of(n: onnx.NodeProto) -> str:
        return "" if n.domain == "ai.onnx" else n.domain

    if not any(msexpand.expandable(domain_of(n), n.op_type, opsets.get(domain_of(n))) for n in gp.node):
        return [(n, None) for n in gp.node]
    used = msexpand.read_names(gp)
    dtypes, ranks = msexpand.graph_types(gp)
    result: list[tuple[onnx.NodeProto, int | None]] = []
    for i, n in enumerate(gp.node):
        if msexpand.expandable(domain_of(n), n.op_type, opsets.get(domain_of(n))):
            result.extend(msexpand.expand(n, n.name or f"{n.op_type}_{i}", opsets, used, dtypes, ranks))
        else:
            result.append((n, None))
    return result


def _check_attribute_types(np_: onnx.NodeProto, name: str, domain: str, opset: int) -> None:
    """ModelError when an attribute's type is not the one the operator's ONNX schema declares."""
    try:
        schema = onnx.defs.get_schema(np_.op_type, opset, domain)
    except onnx.defs.SchemaError:
        return          # no ONNX schema (e.g. com.microsoft ops): the prototype checks what it reads
    op = f"{domain}::{np_.op_type}" if domain else np_.op_type
    seen: set[str] = set()
    for a in np_.attribute:
        if a.name in seen:
            raise ModelError(f"node '{name}' ({op}, opset {opset}) gives attribute '{a.name}' twice")
        seen.add(a.name)
        declared = schema.attributes.get(a.name)
        if declared is not None and int(declared.type) != int(a.type):
            want = AttributeProto.AttributeType.Name(int(declared.type))
            got = AttributeProto.AttributeType.Name(a.type) if a.type in AttributeProto.AttributeType.values() \
                else str(a.type)
            raise ModelError(f"node '{name}' ({op}, opset {opset}): attribute '{a.name}' must be {want}, got {got}")


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
        raise UnsupportedTypeError(f"graph value '{vi.name}' has element type {type_name(tt.elem_type)}, which "
                                   "nnhal does not support")
    if not tt.HasField("shape"):
        return dtype, None
    # NOTE: a negative dim_value is not valid ONNX; it is read as a dim unknown until run time.
    return dtype, tuple(d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None for d in tt.shape.dim)


def _tensor_value(tp: onnx.TensorProto, folder: str | None) -> np.ndarray:
    if to_numpy(tp.data_type) is None:
        raise UnsupportedTypeError(f"tensor '{tp.name}' has element type {type_name(tp.data_type)}, which nnhal "
                                   "does not support")
    if is_external(tp):
        return read_external(tp, folder)
    _check_tensor_size(tp)
    try:
        return numpy_helper.to_array(tp)
    except Exception as exc:
        raise ModelError(f"cannot read tensor '{tp.name}': {exc}") from exc


def _check_tensor_size(tp: onnx.TensorProto) -> None:
    """ModelError unless the tensor holds exactly as many elements as its dims declare."""
    dims = list(tp.dims)
    if any(d < 0 for d in dims):
        raise ModelError(f"tensor '{tp.name}' declares negative dims {dims}")
    count = 1
    for d in dims:
        count *= d
    if tp.HasField("raw_data"):
        if tp.data_type == onnx.TensorProto.STRING:
            raise ModelError(f"tensor '{tp.name}' is a string tensor with raw data; strings are kept in string_data")
        itemsize = to_numpy(tp.data_type).itemsize
        held, need = len(tp.raw_data), count * itemsize
        if held != need:
            raise ModelError(f"tensor '{tp.name}' holds {held} bytes of raw data; its dims {dims} need {need}")
        return
    held = len(getattr(tp, helper.tensor_dtype_to_field(tp.data_type)))
    if held != count:
        raise ModelError(f"tensor '{tp.name}' holds {held} values; its dims {dims} need {count}")


def _attribute(a: AttributeProto, opsets: dict[str, int], scope: frozenset[str] | set[str],
               unsupported: dict[tuple[str, int], str], folder: str | None) -> Any:
    t = a.type
    if t == AttributeProto.FLOAT:
        return float(a.f)
    if t == AttributeProto.INT:
        return int(a.i)
    if t == AttributeProto.STRING:
        return a.s.decode("utf-8", errors="replace")
    if t == AttributeProto.TENSOR:
        return _tensor_value(a.t, folder)
    if t == AttributeProto.GRAPH:
        return _convert_graph(a.g, opsets, frozenset(scope), unsupported, folder)
    if t == AttributeProto.FLOATS:
        return [float(x) for x in a.floats]
    if t == AttributeProto.INTS:
        return [int(x) for x in a.ints]
    if t == AttributeProto.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in a.strings]
    if t == AttributeProto.TENSORS:
        return [_tensor_value(x, folder) for x in a.tensors]
    if t == AttributeProto.GRAPHS:
        return [_convert_graph(g, opsets, frozenset(scope), unsupported, folder) for g in a.graphs]
    if t == AttributeProto.TYPE_PROTO:
        return a.tp
    raise ModelError(f"attribute '{a.name}' has type {AttributeProto.AttributeType.Name(t)}, which nnhal does not "
                     "support")


def _label(source: ModelSource) -> str:
    if isinstance(source, onnx.ModelProto):
        return "a ModelProto"
    return "bytes" if isinstance(source, (bytes, bytearray, memoryview)) else f"'{source}'"
