"""ONNX export: a Subgraph (or one node) as a standalone, valid ONNX model.

What a vendor-runtime device hands its compiler (OpenVINO, TensorRT, a vendor's NNAPI driver): the
nodes of the subgraph, each with only the attributes its own opset defines and the model gave (nnhal's
IR fills every default, some from newer schemas: an opset-9 MaxPool carries ``ceil_mode``; a default
is left out, so the vendor reads the schema's own), the constants as initializers, the boundary
tensors as graph inputs and outputs with their dtypes and shapes (a dim unknown before the run becomes
a symbolic one), and the opset imports of every domain the nodes use (``com.microsoft`` included).
Control-flow bodies (If, Loop, Scan) are exported as nested graphs.

    model = export_subgraph(subgraph)                # onnx.ModelProto
    model = export_node(node, input_infos, output_infos, opsets)   # one candidate node, for a query
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from nnhal.errors import UnsupportedError, UnsupportedTypeError
from nnhal.graph.dtypes import NUMPY_TO_ONNX
from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.subgraph import Subgraph
from nnhal.graph.tensor import Tensor
from nnhal.operator.base import Info

# NOTE: domains with no ONNX schema in the onnx wheel whose nodes a vendor runtime may still know
# (onnxruntime's contrib ops); nnhal's own domains (ai.nnhal) have no meaning outside nnhal.
FOREIGN_DOMAINS = frozenset({"com.microsoft"})
MIN_IR_VERSION = 8      # read by onnxruntime >= 1.10 and OpenVINO; newer opsets raise it to what they need


def export_subgraph(sg: Subgraph, name: str | None = None) -> onnx.ModelProto:
    """``sg`` as an ONNX model: its nodes, its constants as initializers, ``sg.inputs`` as graph inputs and
    ``sg.outputs`` as graph outputs, typed from ``sg.graph``'s tensors. UnsupportedError names a node of a
    domain that has no meaning outside nnhal."""
    graph = _graph(sg.nodes, list(sg.inputs), list(sg.outputs), _lookup(sg.graph.tensors),
                   name or f"{sg.graph.name}_subgraph{sg.index}_{sg.device}", opset=sg.graph.opsets.get("", 1))
    return _model(graph, sg.nodes, sg.graph.opsets)


def export_node(node: Node, inputs: list[Info | None], outputs: list[Info | None],
                opsets: dict[str, int] | None = None) -> onnx.ModelProto:
    """One node as an ONNX model, from what inference knows (a placement Candidate's Infos): inputs with a
    value become initializers, the others graph inputs; outputs typed from ``outputs`` (None = untyped)."""
    known: dict[str, Info] = {}
    for names, infos in ((node.inputs, inputs), (node.outputs, outputs)):
        for tensor, i in zip(names, infos):
            if tensor and i is not None:
                known[tensor] = i
    feeds = [t for t in node.inputs if t and (t not in known or known[t].value is None)]
    graph = _graph([node], list(dict.fromkeys(feeds + node.implicit_inputs)), [t for t in node.outputs if t],
                   lambda t: known.get(t, Info(None, None)), f"{node.op_type}_{node.name}")
    return _model(graph, [node], opsets or {node.domain: node.opset})


# ------------------------------------------------------------------ graphs
def _graph(nodes: list[Node], inputs: list[str], outputs: list[str], info: Callable[[str], Info], name: str,
           outer: frozenset[str] = frozenset(), opset: int = 1) -> onnx.GraphProto:
    """A GraphProto of ``nodes``: every name they read that is not an input, not computed and not of an
    enclosing scope (``outer``, left free: ONNX resolves it outward, as nnhal does) is a constant."""
    feeds = set(inputs)
    produced = {o for n in nodes for o in n.outputs if o}
    nodes, out_infos = list(nodes), []
    for out in outputs:
        if out in produced or out in feeds:
            out_infos.append(_value_info(out, info(out)))
            continue
        # NOTE: an output that is a constant (a folded Constant node) or an outer name passes through an
        # Identity: an ONNX graph output is a value the graph computes or receives
        alias = f"{out}__out"
        nodes.append(Node(f"{out}__identity", "Identity", [out], [alias], opset=opset))
        out_infos.append(_value_info(alias, info(out)))
    initializers, seen = [], set()
    for node in nodes:
        for tensor in node.all_inputs:
            if not tensor or tensor in feeds or tensor in produced or tensor in seen:
                continue
            seen.add(tensor)
            value = info(tensor).value
            if value is not None:
                initializers.append(_initializer(tensor, value))
            elif tensor not in outer:
                raise UnsupportedError(f"node '{node.name}' ({node.op_type}) reads '{tensor}', which is neither "
                                       f"a boundary input of the exported graph nor a constant")
    return helper.make_graph([_node(n) for n in nodes], name, [_value_info(t, info(t)) for t in inputs],
                             out_infos, initializers)


def _body(graph: Graph) -> onnx.GraphProto:
    """A control-flow body, typed from its own tensors; names of enclosing scopes stay free."""
    return _graph(graph.nodes, list(graph.inputs), list(graph.outputs), _lookup(graph.tensors), graph.name,
                  graph.outer, graph.opsets.get("", 1))


def _lookup(tensors: dict[str, Tensor]) -> Callable[[str], Info]:
    """What a graph's tensors say about a name (a constant's value included); unknown names are untyped."""
    def info(tensor: str) -> Info:
        t = tensors.get(tensor)
        return Info(None, None) if t is None else Info(t.dtype, t.shape, t.value if t.is_constant else None)
    return info


def _model(graph: onnx.GraphProto, nodes: Iterable[Node], opsets: dict[str, int]) -> onnx.ModelProto:
    used: dict[str, int] = {"": opsets.get("", 0)}
    for node in _all_nodes(nodes):
        if node.domain not in ("", "ai.onnx") and node.domain not in FOREIGN_DOMAINS:
            raise UnsupportedError(f"node '{node.name}' ({node.domain}::{node.op_type}, opset {node.opset}) is of "
                                   f"nnhal's own domain and has no ONNX form")
        domain = "" if node.domain == "ai.onnx" else node.domain
        used[domain] = max(used.get(domain, 0), node.opset or opsets.get(domain, 1))
    if not used[""]:
        used[""] = onnx.defs.onnx_opset_version()
    imports = [helper.make_opsetid(d, v) for d, v in sorted(used.items())]
    ir = max(MIN_IR_VERSION, helper.find_min_ir_version_for(imports, ignore_unknown=True))
    return helper.make_model(graph, opset_imports=imports, ir_version=ir, producer_name="nnhal")


def _all_nodes(nodes: Iterable[Node]) -> Iterable[Node]:
    for node in nodes:
        yield node
        for value in node.attrs.values():
            for body in value if isinstance(value, list) else [value]:
                if isinstance(body, Graph):
                    yield from _all_nodes(body.nodes)


def _value_info(name: str, info: Info) -> onnx.ValueInfoProto:
    if info.dtype is None:
        return helper.make_empty_tensor_value_info(name)
    shape = None if info.shape is None else [d if d is not None else f"{name}_d{i}" for i, d in enumerate(info.shape)]
    return helper.make_tensor_value_info(name, _elem(name, info.dtype), shape)


def _elem(name: str, dtype: np.dtype) -> int:
    try:
        return NUMPY_TO_ONNX[np.dtype(dtype)]
    except KeyError:
        raise UnsupportedTypeError(f"tensor '{name}' has dtype {dtype}, which has no ONNX element type") from None


def _initializer(name: str, value: np.ndarray) -> onnx.TensorProto:
    value = np.asarray(value)
    _elem(name, value.dtype)
    return numpy_helper.from_array(value, name)


# ------------------------------------------------------------------- nodes
def _node(node: Node) -> onnx.NodeProto:
    proto = helper.make_node(node.op_type, list(node.inputs), list(node.outputs), name=node.name,
                             domain="" if node.domain == "ai.onnx" else node.domain)
    proto.attribute.extend(node_attributes(node))
    return proto


def _schema(node: Node) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(node.op_type, node.opset or onnx.defs.onnx_opset_version(), node.domain)
    except onnx.defs.SchemaError:
        return None


def node_attributes(node: Node) -> list[onnx.AttributeProto]:
    """The attributes of ``node`` as its own opset defines them: an attribute its schema lacks (a default
    nnhal's IR filled from another version) is dropped, and so is one equal to the schema's default or
    unset (None); the type is the schema's. Without an ONNX schema (com.microsoft) every set attribute stays."""
    schema = _schema(node)
    out = []
    for name, value in sorted(node.attrs.items()):
        if value is None:
            continue
        if schema is None:
            out.append(_attribute(name, value, None))
            continue
        declared = schema.attributes.get(name)
        if declared is None:
            continue
        if declared.default_value.type != AttributeProto.UNDEFINED and \
                _same(helper.get_attribute_value(declared.default_value), value):
            continue
        out.append(_attribute(name, value, int(declared.type)))
    return out


def _same(default, value) -> bool:
    if isinstance(default, bytes):
        default = default.decode("utf-8", errors="replace")
    if isinstance(default, (list, tuple)) or isinstance(value, (list, tuple, np.ndarray)):
        return isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)) and list(default) == list(value)
    if isinstance(default, onnx.TensorProto) or isinstance(value, Graph):
        return False
    return type(default) in (int, float, str) and default == value


def _attribute(name: str, value, kind: int | None) -> onnx.AttributeProto:
    if isinstance(value, Graph):
        return helper.make_attribute(name, _body(value))
    if isinstance(value, list) and value and all(isinstance(v, Graph) for v in value):
        return helper.make_attribute(name, [_body(v) for v in value])
    if isinstance(value, onnx.TypeProto):
        return helper.make_attribute(name, value)
    if kind == AttributeProto.TENSOR or isinstance(value, np.ndarray):
        return helper.make_attribute(name, _initializer("", value))
    if kind == AttributeProto.TENSORS:
        return helper.make_attribute(name, [_initializer("", v) for v in value])
    if kind == AttributeProto.FLOAT:
        return helper.make_attribute(name, float(value))
    if kind == AttributeProto.INT:
        return helper.make_attribute(name, int(value))
    if kind == AttributeProto.FLOATS:
        return helper.make_attribute(name, [float(v) for v in value], attr_type=AttributeProto.FLOATS)
    if kind == AttributeProto.INTS:
        return helper.make_attribute(name, [int(v) for v in value], attr_type=AttributeProto.INTS)
    if kind == AttributeProto.STRINGS:
        return helper.make_attribute(name, [str(v) for v in value], attr_type=AttributeProto.STRINGS)
    return helper.make_attribute(name, value)
