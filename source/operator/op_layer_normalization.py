"""LayerNormalization: normalize over the trailing axes from ``axis``; optional Mean, InvStdDev."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator._nn import require_float, stash_dtype
from nnhal.operator.base import Info, Prototype, broadcast, normalize_axis


class LayerNormalization(Prototype):
    op_type = "LayerNormalization"
    versions = (17,)
    inputs = (2, 3)
    outputs = (1, 3)
    attributes = {"axis": -1, "epsilon": 1e-5, "stash_type": 1}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        require_float(self, node, x)
        stash = stash_dtype(self, node)
        stat_shape = None
        if x.shape is not None:
            axis = normalize_axis(node, node.attrs["axis"], len(x.shape))
            stat_shape = tuple(x.shape[:axis]) + (1,) * (len(x.shape) - axis)
            normalized = tuple(x.shape[axis:])
            for i, what in ((1, "Scale"), (2, "B")):
                p = ins[i] if i < len(ins) else None
                if p is not None and p.shape is not None and broadcast(node, p.shape, normalized) != normalized:
                    raise self.fail(node, f"{what} shape {p.shape} does not broadcast to the normalized "
                                          f"shape {normalized}")
        return [Info(x.dtype, x.shape), Info(stash, stat_shape), Info(stash, stat_shape)]
