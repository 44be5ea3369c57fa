"""RotaryEmbedding on the CPU: the rotation on strided views, heads never transposed."""
from __future__ import annotations

import numpy as np

from nnhal.errors import ShapeError, where
from nnhal.hostkernels.base import Kernel, RunFn, store


def rotate(node, x: np.ndarray, cos: np.ndarray, sin: np.ndarray, position_ids: np.ndarray | None) -> np.ndarray:
    """Apply the rotary embedding to X (B, H, S, D) or (B, S, H*D)."""
    heads = node.attrs["num_heads"]
    view = x.reshape(x.shape[0], x.shape[1], heads, -1) if x.ndim == 3 else x
    head_size = view.shape[-1]
    rot = node.attrs["rotary_embedding_dim"] or head_size
    half = rot // 2
    if position_ids is not None:
        cos, sin = cos[position_ids], sin[position_ids]    # (B, S, rot/2)
    if cos.shape[-1] != half or sin.shape[-1] != half or rot > head_size or rot % 2:
        raise ShapeError(f"{where(node)}: caches of width {cos.shape[-1]} do not fit rotary dimension {rot} "
                         f"of heads of size {head_size}")
    # NOTE: caches are (B, S, rot/2); the head axis is 2 for (B, S, H, D) and 1 for (B, H, S, D).
    axis = 2 if x.ndim == 3 else 1
    cos, sin = np.expand_dims(cos, axis), np.expand_dims(sin, axis)
    if node.attrs["interleaved"]:
        first, second = slice(0, rot, 2), slice(1, rot, 2)
    else:
        first, second = slice(0, half), slice(half, rot)
    x1, x2 = view[..., first], view[..., second]
    out = view.copy()
    out[..., first] = cos * x1 - sin * x2
    out[..., second] = sin * x1 + cos * x2
    return out.reshape(x.shape)


class RotaryEmbeddingKernel(Kernel):
    op_type = "RotaryEmbedding"

    def prepare(self, node, ins, outs) -> RunFn:
        dtype = outs[0].dtype

        def run(inputs, outputs):
            x, cos, sin = inputs[0], inputs[1], inputs[2]
            position_ids = inputs[3] if len(inputs) > 3 else None
            return (store(rotate(node, x, cos, sin, position_ids), outputs[0], dtype),)

        return run


IMPLEMENTATIONS = (RotaryEmbeddingKernel,)
