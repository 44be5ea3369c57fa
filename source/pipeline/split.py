"""Stage: split. The placed graph cut into subgraphs: each device with its own ``split_graph`` groups only
its own nodes (its result checked), every other node goes to the default split (maximal acyclic same-device
groups), and the whole is checked again (optimizer/split.py, split_per_device). Each subgraph
gets its precision (the asked one where its device describes it, else fp32) and the int8 plan's sets."""
from __future__ import annotations

from dataclasses import dataclass

from nnhal.device.manager import find_device
from nnhal.graph.graph import Graph
from nnhal.graph.subgraph import Subgraph
from nnhal.optimizer.outliers import Int8Plan
from nnhal.optimizer.split import split_per_device
from nnhal.options import Options
from nnhal.pipeline.placement import Placed


@dataclass
class Split:
    graph: Graph                # the graph the subgraphs view
    subgraphs: list[Subgraph]


def split(graph: Graph, placed: Placed, plan: Int8Plan | None, options: Options) -> Split:
    assignment = {n: d.device for n, d in placed.decisions.items()}
    subgraphs = split_per_device(graph, assignment, placed.devices)
    for sg in subgraphs:
        sg.original_nodes = list(sg.nodes)
        sg.precision = options.precision if options.precision in find_device(sg.device).describe().precisions \
            else "fp32"
        sg.keep_fp32 = options.keep_fp32
        if plan is not None:
            sg.higher, sg.dynamic, sg.dynamic_block = frozenset(plan.higher), dict(plan.dynamic), plan.block
    return Split(graph, subgraphs)
