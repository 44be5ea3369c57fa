"""fp16 with float16 storage and float32 compute: the CPU device's fp16.

numpy has no float16 matrix product (it widens element by element), so a
graph stored and computed in float16 runs 4x-16x slower than in float32 on a
CPU. ``to_fp16_storage`` keeps what fp16 means to the user and drops the cost,
as ONNX Runtime's CPU provider does for fp16 models and as Android NNAPI's
relaxed fp32 mode allows (fp16 range and precision *or better*):

- every float32 constant (weights, biases, the constants of If / Loop / Scan
  bodies, ConstantOfShape fill values) is rounded to the nearest float16,
  saturating at +-65504 (inf and NaN stay), and kept as float32;
- every float32 tensor that crosses the subgraph's boundary crosses as
  float16 (``Subgraph.input_formats`` / ``output_formats``; the core casts):
  a Cast to float32 opens the subgraph and a Cast to float16 closes it;
- in between every node computes in float32 on float32 tensors, with the
  same kernels as fp32; activations inside the subgraph are not rounded.

So the result reflects fp16 weights and fp16 inputs and outputs, and is at
least as accurate as fp16 computation everywhere: it stays within the NNAPI
relaxed tolerance (atol = rtol = 5 * 2^-10) of fp32 wherever true fp16 does.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.subgraph import Format, Subgraph
from nnhal.graph.tensor import Tensor, TensorKind
from nnhal.optimizer.infer import infer_graph
from nnhal.optimizer.precision import F16, F32, half, make_node, map_bodies, subgraph_graph

# How a device using this pass computes fp16, for its Description.compute.
COMPUTE = "float16 storage (weights, subgraph boundaries), float32 compute"


def round_to_half(value: np.ndarray) -> np.ndarray:
    """A float32 array holding the float16 values nearest ``value`` (saturating)."""
    return half(value).astype(F32)


def _round_constants(g: Graph) -> Graph:
    """Round every float32 constant and fill value of ``g`` and of its bodies (in place on a copy)."""
    for name, t in g.tensors.items():
        if t.kind is TensorKind.CONSTANT and t.value is not None and t.value.dtype == F32:
            g.tensors[name] = Tensor(t.name, t.dtype, t.shape, t.kind, round_to_half(t.value), t.layout, t.quant)
    for node in g.nodes:
        _round_attrs(node)
        map_bodies(node, _round_constants)
    return g


def _round_attrs(node: Node) -> None:
    """Round a ConstantOfShape's float32 fill value (Constant nodes are constant tensors after import)."""
    value = node.attrs.get("value")
    if node.op_type == "ConstantOfShape" and not node.domain and isinstance(value, np.ndarray) \
            and value.dtype == F32:
        node.attrs["value"] = round_to_half(value)


def rename_reads(g: Graph, mapping: dict[str, str]) -> None:
    """Make every read of a tensor in ``mapping`` (in ``g`` and, through outer scope, in its bodies) read the new
    name."""
    def rename(body: Graph) -> Graph:
        if body.outer:
            body.outer = frozenset(mapping.get(n, n) for n in body.outer)
        for old, new in mapping.items():
            if old in body.tensors and not body.tensors[old].is_constant and old not in body.inputs:
                body.tensors[new] = Tensor(new, body.tensors.pop(old).dtype, kind=TensorKind.INPUT)
        body.outputs = [mapping.get(n, n) for n in body.outputs]
        _rename_nodes(body.nodes)
        return body

    def _rename_nodes(nodes: list[Node]) -> None:
        for node in nodes:
            node.inputs = [mapping.get(n, n) for n in node.inputs]
            node.implicit_inputs = [mapping.get(n, n) for n in node.implicit_inputs]
            if any(isinstance(v, Graph) for v in node.attrs.values()):
                map_bodies(node, rename)

    _rename_nodes(g.nodes)


def to_fp16_storage(sg: Subgraph) -> Subgraph:
    """Rewrite ``sg`` to fp16 semantics with float32 compute (module docstring)."""
    g = _round_constants(subgraph_graph(sg))
    opset = sg.graph.opsets.get("", 17)
    floats = [n for n in dict.fromkeys(sg.inputs + sg.outputs) if g.tensors[n].dtype == F32]
    wide = {n: f"{n}::fp32" for n in floats}
    rename_reads(g, wide)
    opening, closing = [], []
    for name in sg.inputs:
        if name in wide:
            g.tensors[wide[name]] = Tensor(wide[name], F32, g.tensors[name].shape)
            opening.append(make_node(f"{name}::to_fp32", "Cast", [name], [wide[name]], {"to": TensorProto.FLOAT},
                                     opset))
    for node in g.nodes:
        node.outputs = [wide.get(n, n) for n in node.outputs]     # never an input: inputs are not produced
    for name in sg.outputs:
        if name in wide and name not in sg.inputs:
            g.tensors[wide[name]] = Tensor(wide[name], F32, g.tensors[name].shape)
            closing.append(make_node(f"{name}::to_fp16", "Cast", [wide[name]], [name], {"to": TensorProto.FLOAT16},
                                     opset))
    for name in floats:
        g.tensors[name].dtype = F16
    g.nodes = opening + g.nodes + closing
    infer_graph(g, fold=False, check_types=False)
    sg.graph, sg.nodes = g, g.nodes
    for names, formats in ((sg.inputs, sg.input_formats), (sg.outputs, sg.output_formats)):
        for name in names:
            if name in floats:
                formats[name] = Format(F16)
    sg.precision = "fp16"
    return sg
