"""A ReduceMean over the two spatial axes of an image is a GlobalAveragePool (fuse_spatial_means).

torchvision's ShuffleNet v2 (and many timm heads) end in ``x.mean((2, 3))``: a ReduceMean over axes 2 and 3 of
the last (N, C, H, W) feature map. ReduceMean has no channels-last kernel, so the layout pass converted that whole
map back to NCHW (``to-nchw``) for numpy's mean. GlobalAveragePool computes the same means and has a native
channels-last kernel (each channel summed in pixel order, then divided by H * W); its (N, C, 1, 1) output leaves
the region as a view. keepdims=0 adds a Flatten(axis=1) of that pooled tensor, a view of it.
"""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.fusions import Chosen
from nnhal.device.cpu.kernels import select
from nnhal.device.cpu.kernels.reduce import static_axes
from nnhal.errors import NnhalError
from nnhal.graph.node import Node
from nnhal.operator.base import Info
from nnhal.operator.table import get_prototype


def _spatial_mean(node: Node, ins: list[Info | None]) -> bool:
    """``node`` is a ReduceMean of a static 4-D float32 tensor over exactly its axes 2 and 3."""
    if node.op_type != "ReduceMean" or node.domain or not node.inputs or not node.outputs[0]:
        return False
    x = ins[0] if ins else None
    if x is None or x.value is not None or not x.static or len(x.shape) != 4 or x.dtype != np.float32:
        return False
    try:
        axes = static_axes(node, ins)
    except (NnhalError, ValueError):
        return False
    return axes is not None and tuple(sorted(axes)) == (2, 3)


def _version(op: str, opset: int) -> int:
    """The version of the default-domain ``op`` that ``opset`` selects (both ops exist since opset 1)."""
    return get_prototype("", op).version_for(opset) or 1


def fuse_spatial_means(chosen: list[Chosen], external: set[str]) -> list[Chosen]:
    """Each float32 ReduceMean over axes (2, 3) of a static 4-D tensor becomes a GlobalAveragePool, followed
    (keepdims=0) by a Flatten(axis=1) of the pooled (N, C, 1, 1) tensor into the ReduceMean's output; see the
    module's note. A node whose replacement no kernel takes is kept as it was. ``external``: unused (no tensor
    is removed; the new pooled tensor of keepdims=0 is the only new name)."""
    result: list[Chosen] = []
    for entry in chosen:
        node, _, ins, outs = entry
        if not _spatial_mean(node, ins):
            result.append(entry)
            continue
        n, c = ins[0].shape[:2]
        out = node.outputs[0]
        keep = bool(node.attrs.get("keepdims", 1))
        pooled = out if keep else f"{node.name}/pooled"
        pooled_info = Info(ins[0].dtype, (n, c, 1, 1))
        gap = Node(f"{node.name}/global_average", "GlobalAveragePool", [node.inputs[0]], [pooled], {},
                   opset=node.opset, version=_version("GlobalAveragePool", node.opset))
        try:
            steps = [Chosen(gap, select(gap, [ins[0]], [pooled_info]), [ins[0]], [pooled_info])]
            if not keep:
                flat = Node(f"{node.name}/flatten", "Flatten", [pooled], [out], {"axis": 1}, opset=node.opset,
                            version=_version("Flatten", node.opset))
                steps.append(Chosen(flat, select(flat, [pooled_info], list(outs)), [pooled_info], list(outs)))
        except NnhalError:
            result.append(entry)
            continue
        result.extend(steps)
    return result
