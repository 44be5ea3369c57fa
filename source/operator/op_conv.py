"""Conv: N-d convolution with groups, dilations, strides and padding."""
from __future__ import annotations

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype
from nnhal.operator.spatial import output_sizes, resolve_pads


class Conv(Prototype):
    op_type = "Conv"
    versions = (1, 11, 22)
    inputs = (2, 3)
    attributes = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
                  "pads": None, "strides": None}

    def check(self, node: Node) -> None:
        if node.attrs["group"] < 1:
            raise ModelError(f"{where(node)}: group must be >= 1, got {node.attrs['group']}")

    def geometry(self, node: Node, x_shape: tuple, w_shape: tuple) -> dict:
        """Kernel, strides, dilations and explicit pads for given input and weight shapes."""
        n = len(x_shape) - 2
        kernel = list(node.attrs["kernel_shape"] or w_shape[2:])
        strides = list(node.attrs["strides"] or [1] * n)
        dilations = list(node.attrs["dilations"] or [1] * n)
        pads = resolve_pads(node, list(x_shape[2:]), kernel, strides, dilations)
        return {"kernel": kernel, "strides": strides, "dilations": dilations, "pads": pads}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, w = ins[0], ins[1]
        if x.shape is None or w.shape is None or not x.static:
            return [Info(x.dtype, None if x.shape is None else (x.shape[0], w.shape[0] if w.shape else None) + (None,) * (len(x.shape) - 2))]
        if len(x.shape) < 3 or len(w.shape) != len(x.shape):
            raise self.fail(node, f"input rank {len(x.shape)} and weight rank {len(w.shape)} do not form a convolution")
        group = node.attrs["group"]
        if x.shape[1] != w.shape[1] * group:
            raise self.fail(node, f"input has {x.shape[1]} channels; weight expects {w.shape[1]} x group {group}")
        g = self.geometry(node, x.shape, w.shape)
        spatial = output_sizes(node, list(x.shape[2:]), g["kernel"], g["strides"], g["dilations"], g["pads"])
        return [Info(x.dtype, (x.shape[0], w.shape[0], *spatial))]
