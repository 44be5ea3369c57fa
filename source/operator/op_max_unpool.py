"""MaxUnpool: scatter pooled values back to the positions MaxPool's Indices name."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator._nn import check_positive
from nnhal.operator.base import REQUIRED, Info, Prototype


class MaxUnpool(Prototype):
    op_type = "MaxUnpool"
    versions = (9, 11, 22)
    inputs = (2, 3)
    attributes = {"kernel_shape": REQUIRED, "pads": None, "strides": None}

    def check(self, node: Node) -> None:
        check_positive(node, "kernel_shape", "strides")

    def default_shape(self, node: Node, x_shape: tuple) -> tuple:
        """Output shape without output_shape: the inverse of the pooling size formula."""
        n = len(x_shape) - 2
        kernel = node.attrs["kernel_shape"]
        strides = node.attrs["strides"] or [1] * n
        pads = node.attrs["pads"] or [0] * (2 * n)
        spatial = tuple(None if d is None else (d - 1) * s + k - pads[i] - pads[i + n]
                        for i, (d, s, k) in enumerate(zip(x_shape[2:], strides, kernel)))
        return tuple(x_shape[:2]) + spatial

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        shape_in = ins[2] if len(ins) > 2 else None
        if shape_in is not None:
            if shape_in.value is not None:
                return [Info(x.dtype, tuple(int(v) for v in shape_in.value.reshape(-1)))]
            rank = None if x.shape is None else len(x.shape)
            return [Info(x.dtype, None if rank is None else (None,) * rank)]
        if x.shape is None:
            return [Info(x.dtype, None)]
        return [Info(x.dtype, self.default_shape(node, x.shape))]
