"""The allocation budget of a prepared graph, checked against inferred shapes before allocating.

Every tensor a node of the graph produces is counted at its full static size
(devices may reuse memory, so this is an upper bound), with the bytes constant
folding already materialised. A tensor whose shape is known only at run time
is not counted. Crossing the budget is a LimitError naming the node that
crossed it, its op and the sizes.
"""
from __future__ import annotations

from nnhal.errors import LimitError, where
from nnhal.graph.graph import Graph
from nnhal.graph.tensor import Tensor


def tensor_bytes(t: Tensor) -> int | None:
    """Bytes of a static tensor (exact, without int64 overflow), else None."""
    if not t.static:
        return None
    count = 1
    for d in t.shape:
        count *= int(d)
    return count * t.dtype.itemsize


def check_budget(graph: Graph, max_bytes: int, folded: int = 0) -> int:
    """Bytes the graph's nodes produce plus ``folded``; LimitError when that exceeds ``max_bytes``."""
    total = folded
    for node in graph.nodes:
        sizes = {n: tensor_bytes(graph.tensors[n]) for n in node.outputs if n and n in graph.tensors}
        size = sum(s for s in sizes.values() if s is not None)
        total += size
        if total > max_bytes:
            shapes = ", ".join(f"{graph.tensors[n].describe()}" for n in sizes)
            raise LimitError(f"{where(node)}: its outputs ({shapes}: {size} bytes) bring the graph's tensors to "
                             f"{total} bytes, over the allocation budget of {max_bytes} bytes; raise "
                             f"Options.max_graph_bytes if the model really needs it")
    return total
