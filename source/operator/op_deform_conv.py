"""DeformConv: convolution sampling the input at learned offsets (with optional mask)."""
from __future__ import annotations

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator._nn import check_positive, require_float
from nnhal.operator.base import Info, Prototype


class DeformConv(Prototype):
    op_type = "DeformConv"
    versions = (19, 22)
    inputs = (3, 5)
    attributes = {"dilations": None, "group": 1, "kernel_shape": None, "offset_group": 1, "pads": None,
                  "strides": None}

    def check(self, node: Node) -> None:
        if node.attrs["group"] < 1 or node.attrs["offset_group"] < 1:
            raise ModelError(f"{where(node)}: group and offset_group must be >= 1")
        check_positive(node, "strides", "dilations", "kernel_shape")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, w, offset = ins[0], ins[1], ins[2]
        require_float(self, node, x)
        if x.shape is not None and len(x.shape) != 4:
            raise self.fail(node, f"input rank {len(x.shape)} is not 4; nnhal runs 2-D DeformConv")
        n = None if x.shape is None else x.shape[0]
        m = None if w.shape is None else w.shape[0]
        spatial = (None, None) if offset.shape is None else tuple(offset.shape[2:])
        return [Info(x.dtype, (n, m, *spatial))]
