"""Device-independent graph passes run at prerun, after inference and folding.

Each pass takes the (prerun copy of the) graph and rewrites it in place,
returning how many nodes it changed. They must keep every graph output and
the graph's results (within the fp32 tolerance policy).
"""
from __future__ import annotations

from collections.abc import Callable

from nnhal.graph.graph import Graph


def remove_dead_nodes(graph: Graph) -> int:
    """Drop nodes none of whose outputs reach a graph output."""
    needed = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if any(o in needed for o in node.outputs if o):
            kept.append(node)
            needed.update(n for n in node.all_inputs if n)
    removed = len(graph.nodes) - len(kept)
    graph.nodes = kept[::-1]
    return removed


PASSES: list[tuple[str, Callable[[Graph], int]]] = [
    ("remove_dead_nodes", remove_dead_nodes),
]


def run_passes(graph: Graph) -> dict[str, int]:
    """Run every pass in order; returns pass name -> nodes changed (for reports)."""
    return {name: fn(graph) for name, fn in PASSES}
