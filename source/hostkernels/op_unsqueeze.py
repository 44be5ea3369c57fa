"""Unsqueeze on the CPU: a view of the input with inserted size-1 dims."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.hostkernels._shape import ViewKernel, ints
from nnhal.operator.op_unsqueeze import unsqueezed


class UnsqueezeView(ViewKernel):
    op_type = "Unsqueeze"

    def target(self, node: Node, inputs: list) -> tuple[int, ...]:
        axes = list(node.attrs["axes"]) if node.version < 13 else ints(inputs[1])
        return unsqueezed(node, inputs[0].shape, axes)


IMPLEMENTATIONS = (UnsqueezeView,)
