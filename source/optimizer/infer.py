"""Shape and dtype inference over a graph, folding constants on the way.

Nodes are visited in topological order. A node whose inputs are all known
values (constants, or shapes of static tensors as Shape reports them) is
evaluated once on the host kernels and its outputs become constants; the node leaves
the graph. Every other node asks its prototype for the outputs' dtype and
shape. Input shapes come from the arrays set before prerun, else from the model.

Folding is bounded (a model is untrusted input): a node is folded only when
its inferred outputs are static and together no larger than
``FoldLimits.max_bytes``, and a Loop only when its trip count is a constant no
larger than ``FoldLimits.max_loop_trips``. Any other node stays in the graph
and runs at run time.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from nnhal.errors import LimitError, ShapeError, where, wrapped
from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.tensor import Tensor, TensorKind
from nnhal.hostkernels.evaluate import evaluate_node
from nnhal.operator.base import Info, Prototype, use_graph_inference
from nnhal.operator.schema import check_input_types
from nnhal.operator.table import get_prototype
from nnhal.optimizer.limits import MAX_FOLD_BYTES, MAX_GRAPH_BYTES, MAX_LOOP_TRIPS

NEVER_FOLD = frozenset({"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli",
                        "Multinomial"})
_TRACE = os.environ.get("NNHAL_TRACE_FOLD")


@dataclass(frozen=True)
class FoldLimits:
    """What constant folding may do at prepare: the largest tensor it materialises (bytes, all
    outputs of one node together), the most Loop iterations it runs, and the bytes it may
    materialise in all (beyond them: LimitError)."""

    max_bytes: int = MAX_FOLD_BYTES
    max_loop_trips: int = MAX_LOOP_TRIPS
    max_total_bytes: int = MAX_GRAPH_BYTES


def info_of(t: Tensor) -> Info:
    return Info(t.dtype, t.shape, t.value if t.kind is TensorKind.CONSTANT else None)


def infer_graph(graph: Graph, fold: bool = True, limits: FoldLimits | None = None, check_types: bool = True) -> int:
    """Infer every tensor of ``graph`` in place and fold what is constant (within ``limits``).

    ``check_types`` checks every input's element type against the op's ONNX schema at the model's opset;
    a device's precision rewrite turns it off (it may run an op on a type only a later opset allows, such
    as MaxPool on int8, which the device's kernels take). Returns the bytes folding materialised.
    """
    limits = limits or FoldLimits()
    kept: list[Node] = []
    folded = 0
    for node in graph.nodes:
        ins = [info_of(graph.tensors[n]) if n else None for n in node.inputs]
        proto = get_prototype(node.domain, node.op_type)
        if check_types:
            check_input_types(node, ins)
        outs = _infer(proto, node, ins, graph)
        if fold and _foldable(node, ins, outs, graph, limits):
            size = output_bytes(node, outs)
            if folded + size > limits.max_total_bytes:
                raise LimitError(f"{where(node)}: folding its {size}-byte output brings the tensors constant "
                                 f"folding materialised to {folded + size} bytes, over the budget of "
                                 f"{limits.max_total_bytes} (Options.max_graph_bytes)")
            folded += size
            values = _evaluate(node, ins, outs, graph)
            for name, value in zip(node.outputs, values):
                if name:
                    _set(graph, name, Info.of(value), constant=True)
            continue
        for name, info in zip(node.outputs, outs):
            if name:
                _set(graph, name, info, constant=fold and info.value is not None)
        if not (fold and all(not n or graph.tensors[n].is_constant for n in node.outputs)):
            kept.append(node)
    graph.nodes = kept
    return folded


def _infer(proto: Prototype, node: Node, ins: list[Info | None], graph: Graph) -> list[Info]:
    with wrapped(lambda exc: ShapeError(f"{where(node)}: shape inference failed for inputs "
                                        f"{[None if i is None else (str(i.dtype), i.shape) for i in ins]}: {exc}")):
        return proto.infer(node, ins + [info_of(graph.tensors[n]) for n in node.implicit_inputs])


def _evaluate(node: Node, ins: list[Info | None], outs: list[Info], graph: Graph) -> list[np.ndarray]:
    arrays = [None if i is None else i.value for i in ins] + [graph.tensors[n].value for n in node.implicit_inputs]
    with wrapped(lambda exc: ShapeError(f"{where(node)}: evaluating it on constant inputs failed: {exc}"),
                 memory=lambda exc: LimitError(f"{where(node)}: constant folding ran out of memory ({exc}); lower "
                                               f"Options.max_fold_bytes to leave such nodes to run time")):
        return evaluate_node(node, arrays, outs)


def _foldable(node: Node, ins: list[Info | None], outs: list[Info], graph: Graph, limits: FoldLimits) -> bool:
    if node.op_type in NEVER_FOLD or node.domain:
        return False
    if any(i is not None and i.value is None for i in ins):
        return False
    for name in node.implicit_inputs:
        t = graph.tensors.get(name)
        if t is None or not t.is_constant:
            return False
    if node.op_type == "Loop" and not _bounded_loop(node, ins, limits):
        return False
    size = output_bytes(node, outs)
    if _TRACE:
        print(f"nnhal fold: {node.op_type} {node.name} -> {size if size is not None else 'unknown'} bytes")
    return size is not None and size <= limits.max_bytes


def _bounded_loop(node: Node, ins: list[Info | None], limits: FoldLimits) -> bool:
    """A Loop folds only with a constant trip count M within the limit (a while-loop may never end)."""
    m = ins[0] if ins else None
    if m is None or m.value is None or np.asarray(m.value).size != 1:
        return False
    return int(np.asarray(m.value).reshape(())) <= limits.max_loop_trips


def output_bytes(node: Node, outs: list[Info]) -> int | None:
    """Bytes of the node's used outputs when every one is static, else None (exact, no overflow)."""
    total = 0
    for name, info in zip(node.outputs, outs):
        if not name:
            continue
        if info.dtype is None or not info.static:
            return None
        count = 1
        for d in info.shape:
            count *= int(d)
        total += count * np.dtype(info.dtype).itemsize
    return total


def _set(graph: Graph, name: str, info: Info, constant: bool) -> None:
    t = graph.tensors.get(name)
    if t is None:
        t = graph.tensors[name] = Tensor(name)
    t.dtype = info.dtype
    t.shape = info.shape
    if constant:
        t.kind = TensorKind.CONSTANT
        t.value = np.asarray(info.value)
        t.shape = tuple(t.value.shape)
        t.dtype = t.value.dtype


use_graph_inference(infer_graph)
