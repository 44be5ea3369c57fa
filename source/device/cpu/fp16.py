"""fp16 with float16 storage and float32 compute: the CPU device's fp16.

numpy has no float16 matrix product (it widens element by element), so a
graph stored and computed in float16 runs 4x-16x slower than in float32 on a
CPU. ``to_fp16_storage`` keeps what fp16 means to the user and drops the cost,
as ONNX Runtime's CPU provider does for fp16 models and as Android NNAPI's
relaxed fp32 mode allows (fp16 range and precision *or better*):

- every float32 constant of more than one element (weights, biases, the
  constants of If / Loop / Scan bodies, ConstantOfShape fill values) is
  rounded to the nearest float16, saturating at +-65504 (inf and NaN stay),
  and kept as float32. A single-element constant is a coefficient of the
  compute (Gelu's sqrt 2, an epsilon, attention's 1/sqrt(d)) and keeps its
  float32 value: "fp16 or better" allows it, and the plan's pattern fusions
  (fusions.fuse_gelu matches x / 1.4142135) still recognize it;
- every float32 tensor that crosses the subgraph's boundary is rounded to
  float16 values where it crosses: a Cast to float16 and the Cast back open
  and close the subgraph, which the plan runs as one native rounding step
  (castfuse.fuse_half_round_trips). The boundary itself stays float32, so the
  core converts nothing (numpy's float32 -> float16 cast has no SIMD path and
  cost 12 ns an element, more than many whole layers);
- in between every node computes in float32 on float32 tensors, with the
  same kernels as fp32; activations inside the subgraph are not rounded.

So the result reflects fp16 weights and fp16 inputs and outputs, and is at
least as accurate as fp16 computation everywhere: it stays within the NNAPI
relaxed tolerance (atol = rtol = 5 * 2^-10) of fp32 wherever true fp16 does.
"""
from __future__ import annotations

from functools import partial

import numpy as np
from onnx import TensorProto

from nnhal.graph.derived import derive
from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.subgraph import Subgraph
from nnhal.graph.tensor import Tensor, TensorKind
from nnhal.optimizer.infer import infer_graph
from nnhal.optimizer.precision import F16, F32, half, make_node, map_bodies, subgraph_graph

# How a device using this pass computes fp16, for its Description.compute.
COMPUTE = "float16 storage (weights, subgraph boundaries), float32 compute"


def round_to_half(value: np.ndarray) -> np.ndarray:
    """A float32 array holding the float16 values nearest ``value`` (saturating)."""
    return half(value).astype(F32)


def _round_constants(g: Graph) -> Graph:
    """Round every float32 constant of more than one element and every fill value of ``g`` and of its bodies
    (in place on a copy)."""
    for name, t in g.tensors.items():
        if t.kind is TensorKind.CONSTANT and t.value is not None and t.value.dtype == F32 and t.value.size > 1:
            # NOTE: through the graph handle's DerivedCache: every prepared input shape shares one rounded copy
            # (and so the packed GEMMs derived from it)
            rounded = derive("fp16.round", (t.value,), None, partial(round_to_half, t.value))
            g.tensors[name] = Tensor(t.name, t.dtype, t.shape, t.kind, rounded, t.layout, t.quant)
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

    def round_trip(source: str, target: str, name: str) -> list[Node]:
        """``target`` = ``source`` rounded to float16 values, kept float32 (a Cast there and back)."""
        half_name = f"{name}::fp16"
        g.tensors[half_name] = Tensor(half_name, F16, g.tensors[name].shape)
        return [make_node(f"{name}::to_fp16", "Cast", [source], [half_name], {"to": TensorProto.FLOAT16}, opset),
                make_node(f"{name}::to_fp32", "Cast", [half_name], [target], {"to": TensorProto.FLOAT}, opset)]

    opening, closing = [], []
    for name in sg.inputs:
        if name in wide:
            g.tensors[wide[name]] = Tensor(wide[name], F32, g.tensors[name].shape)
            opening += round_trip(name, wide[name], name)
    for node in g.nodes:
        node.outputs = [wide.get(n, n) for n in node.outputs]     # never an input: inputs are not produced
    for name in sg.outputs:
        if name in wide and name not in sg.inputs:
            g.tensors[wide[name]] = Tensor(wide[name], F32, g.tensors[name].shape)
            closing += round_trip(wide[name], name, name)
    g.nodes = opening + g.nodes + closing
    infer_graph(g, fold=False, check_types=False)
    sg.graph, sg.nodes = g, g.nodes
    sg.precision = "fp16"
    return sg
