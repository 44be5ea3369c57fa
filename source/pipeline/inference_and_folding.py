"""Stage: inference and folding. A copy of the imported graph specialised to the bound inputs' dtypes and
shapes; the model's own Q/DQ pairs folded (quantized precisions) or fused (float); every tensor's dtype and
shape inferred and constant subgraphs folded, within the prepare bounds."""
from __future__ import annotations

from dataclasses import dataclass

from nnhal.graph.graph import Graph
from nnhal.optimizer.infer import FoldLimits, infer_graph
from nnhal.optimizer.qdq import fold_qdq, fuse_qdq
from nnhal.pipeline.request import Request


@dataclass
class Inferred:
    graph: Graph            # the specialised copy, shapes inferred and constants folded
    folded: int             # bytes folding materialised (the budget check counts them)
    fused_qdq: int          # Q/DQ pairs folded or fused


def infer_and_fold(request: Request) -> Inferred:
    options = request.options
    graph = request.graph.copy()
    for name in graph.inputs:
        if name in request.inputs:
            t = graph.tensors[name]
            t.dtype, t.shape = request.inputs[name].dtype, tuple(request.inputs[name].shape)
    # quantized precisions take the model's own Q/DQ parameters; fp32 runs them as integer ops
    fused = fold_qdq(graph) if options.precision in ("int8", "uint8") else fuse_qdq(graph)
    limits = FoldLimits(options.max_fold_bytes, options.max_loop_trips, options.max_graph_bytes)
    folded = infer_graph(graph, fold=options.fold_constants, limits=limits)
    return Inferred(graph, folded, fused)
