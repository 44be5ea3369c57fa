"""Squeeze on the CPU: a view of the input without the squeezed dims."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.hostkernels._shape import ViewKernel, ints


class SqueezeView(ViewKernel):
    op_type = "Squeeze"

    def target(self, node: Node, inputs: list) -> tuple[int, ...]:
        shape = inputs[0].shape
        if node.version < 13:
            axes = node.attrs["axes"]
        else:
            axes = ints(inputs[1]) if len(inputs) > 1 else None
        if axes is None:
            return tuple(d for d in shape if d != 1)
        rank = len(shape)
        drop = {a + rank if a < 0 else a for a in axes}
        if any(not 0 <= a < rank or shape[a] != 1 for a in drop):
            raise ValueError(f"cannot squeeze axes {axes} of shape {shape}")
        return tuple(d for i, d in enumerate(shape) if i not in drop)


IMPLEMENTATIONS = (SqueezeView,)
