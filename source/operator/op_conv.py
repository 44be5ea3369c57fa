"""Conv: N-d convolution with groups, dilations, strides and padding."""
from __future__ import annotations

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype, expect_shape
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

    def check_operands(self, node: Node, x: tuple | None, w: tuple | None, bias: Info | None = None) -> None:
        """ShapeError unless input, weight (and bias) shapes form this convolution (unknown dims pass)."""
        if x is None or w is None:
            return
        group = node.attrs["group"]
        if len(x) < 3 or len(w) != len(x):
            raise self.fail(node, f"input rank {len(x)} and weight rank {len(w)} do not form a convolution")
        if x[1] is not None and w[1] is not None and x[1] != w[1] * group:
            raise self.fail(node, f"input has {x[1]} channels; weight expects {w[1]} x group {group}")
        if w[0] is not None and w[0] % group:
            raise self.fail(node, f"{w[0]} output channels do not split into {group} groups")
        kernel = node.attrs["kernel_shape"]
        if kernel is not None and any(k != d for k, d in zip(kernel, w[2:]) if d is not None):
            raise self.fail(node, f"kernel_shape {list(kernel)} differs from the weight's spatial dims {w[2:]}")
        if any(d == 0 for d in w if d is not None):
            raise self.fail(node, f"weight shape {w} has a zero dim")
        expect_shape(node, bias, (w[0],), "B")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, w = ins[0], ins[1]
        self.check_operands(node, x.shape, w.shape, ins[2] if len(ins) > 2 else None)
        if x.shape is None or w.shape is None or not x.static or any(d is None for d in w.shape):
            if x.shape is None:
                return [Info(x.dtype, None)]
            return [Info(x.dtype, (x.shape[0], w.shape[0] if w.shape else None) + (None,) * (len(x.shape) - 2))]
        g = self.geometry(node, x.shape, w.shape)
        spatial = output_sizes(node, list(x.shape[2:]), g["kernel"], g["strides"], g["dilations"], g["pads"])
        return [Info(x.dtype, (x.shape[0], w.shape[0], *spatial))]
