"""Shared geometry of convolution and pooling: pads, output sizes."""
from __future__ import annotations

from nnhal.errors import ShapeError, where
from nnhal.graph.node import Node


def check_window(node: Node, rank: int, kernel: list[int], strides: list[int], dilations: list[int]) -> None:
    """ShapeError unless kernel, strides and dilations each give ``rank`` values, all >= 1."""
    for name, values in (("kernel_shape", kernel), ("strides", strides), ("dilations", dilations)):
        if len(values) != rank:
            raise ShapeError(f"{where(node)}: {name} {list(values)} has {len(values)} values for {rank} spatial dims")
        if any(int(v) < 1 for v in values):
            raise ShapeError(f"{where(node)}: {name} must be >= 1, got {list(values)}")


def resolve_pads(node: Node, in_sizes: list[int], kernel: list[int], strides: list[int],
                 dilations: list[int], ceil_mode: bool = False) -> list[int]:
    """Explicit pads [b1, b2, ..., e1, e2, ...] for the node's auto_pad setting."""
    check_window(node, len(in_sizes), kernel, strides, dilations)
    n = len(kernel)
    auto_pad = node.attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", ""):
        pads = list(node.attrs.get("pads") or [0] * (2 * n))
        if len(pads) != 2 * n:
            raise ShapeError(f"{where(node)}: pads has {len(pads)} values, expected {2 * n}")
        if any(int(p) < 0 for p in pads):
            raise ShapeError(f"{where(node)}: pads must be >= 0, got {pads}")
        return pads
    if auto_pad == "VALID":
        return [0] * (2 * n)
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise ShapeError(f"{where(node)}: auto_pad '{auto_pad}' is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER")
    begins, ends = [], []
    for size, k, s, d in zip(in_sizes, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        if auto_pad == "SAME_UPPER":
            begins.append(small)
            ends.append(big)
        else:
            begins.append(big)
            ends.append(small)
    return begins + ends


def output_sizes(node: Node, in_sizes: list[int], kernel: list[int], strides: list[int],
                 dilations: list[int], pads: list[int], ceil_mode: bool = False) -> list[int]:
    """Spatial output sizes of a convolution or pooling window."""
    n = len(kernel)
    out = []
    for i in range(n):
        span = (kernel[i] - 1) * dilations[i] + 1
        padded = in_sizes[i] + pads[i] + pads[i + n]
        if ceil_mode:
            size = -(-(padded - span) // strides[i]) + 1
            # the last window must start inside the input or left padding
            if (size - 1) * strides[i] >= in_sizes[i] + pads[i]:
                size -= 1
        else:
            size = (padded - span) // strides[i] + 1
        if size < 1:
            raise ShapeError(f"{where(node)}: window {kernel} does not fit input {in_sizes} with pads {pads}")
        out.append(size)
    return out
