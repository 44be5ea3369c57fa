"""Shape and dtype inference over a graph, folding constants on the way.

Nodes are visited in topological order. A node whose inputs are all known
values (constants, or shapes of static tensors as Shape reports them) is
evaluated once on the host kernels and its outputs become constants; the node leaves
the graph. Every other node asks its prototype for the outputs' dtype and
shape. Input shapes come from the arrays set before prerun, else from the model.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from nnhal.hostkernels.evaluate import evaluate_node
from nnhal.errors import NnhalError, ShapeError, where
from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.tensor import Tensor, TensorKind
from nnhal.operator.base import Info, use_graph_inference
from nnhal.operator.table import get_prototype

# NOTE: folding a node bigger than this is left to run time (memory, prerun time).
MAX_FOLD_BYTES = 1 << 30
NEVER_FOLD = frozenset({"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli", "Multinomial"})


def info_of(t: Tensor) -> Info:
    return Info(t.dtype, t.shape, t.value if t.kind is TensorKind.CONSTANT else None)


def infer_graph(graph: Graph, fold: bool = True) -> None:
    """Infer every tensor of ``graph`` in place and fold what is constant."""
    kept: list[Node] = []
    for node in graph.nodes:
        ins = [info_of(graph.tensors[n]) if n else None for n in node.inputs]
        proto = get_prototype(node.domain, node.op_type)
        if fold and _foldable(node, ins, graph):
            try:
                values = evaluate_node(node, [None if i is None else i.value for i in ins]
                                       + [graph.tensors[n].value for n in node.implicit_inputs])
            except NnhalError:
                raise
            except Exception as exc:
                raise ShapeError(f"{where(node)}: evaluating it on constant inputs failed: {exc}") from exc
            for name, value in zip(node.outputs, values):
                if name:
                    _set(graph, name, Info.of(value), constant=True)
            continue
        try:
            outs = proto.infer(node, ins + [info_of(graph.tensors[n]) for n in node.implicit_inputs])
        except NnhalError:
            raise
        except Exception as exc:
            raise ShapeError(f"{where(node)}: shape inference failed for inputs "
                             f"{[None if i is None else (str(i.dtype), i.shape) for i in ins]}: {exc}") from exc
        for name, info in zip(node.outputs, outs):
            if name:
                _set(graph, name, info, constant=fold and info.value is not None)
        if not (fold and all(not n or graph.tensors[n].is_constant for n in node.outputs)):
            kept.append(node)
    graph.nodes = kept


def _foldable(node: Node, ins: list[Info | None], graph: Graph) -> bool:
    if node.op_type in NEVER_FOLD or node.domain:
        return False
    if any(i is not None and i.value is None for i in ins):
        return False
    size = sum(i.value.nbytes for i in ins if i is not None)
    if size > MAX_FOLD_BYTES:
        return False
    for name in node.implicit_inputs:
        t = graph.tensors.get(name)
        if t is None or not t.is_constant:
            return False
    return True


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
