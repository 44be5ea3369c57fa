"""QAttention (com.microsoft) on the CPU: MatMulIntegerToFloat's exact QKV projection (float64 BLAS), then
self-attention in float32 as onnxruntime computes it: ``softmax(scale * Q K^T + mask) V`` per head, the mask a
[B] key length or a [B, total] 0 / 1 raw mask turned into ``mask_filter_value`` on the blocked keys."""
from __future__ import annotations

import numpy as np

from nnhal.errors import UnsupportedError, where
from nnhal.hostkernels.base import FunctionKernel
from nnhal.hostkernels.ms_matmul_integer_to_float import MatMulIntegerToFloatKernel
from nnhal.hostkernels.op_attention import merge_heads, split_heads


def key_bias(node, mask: np.ndarray | None, batch: int, total: int) -> np.ndarray | None:
    """The additive float32 bias (B, 1, 1, total) of QAttention's mask_index, None without one."""
    if mask is None:
        return None
    if mask.shape == (batch,):
        allowed = np.arange(total)[None, :] < mask.astype(np.int64)[:, None]
    elif mask.shape == (batch, total):
        allowed = mask != 0
    else:
        raise UnsupportedError(f"{where(node)}: mask_index of shape {mask.shape} is not supported; nnhal takes "
                               f"[B] key lengths or a [B, total] raw mask (B = {batch}, total = {total})")
    blocked = np.float32(node.attrs["mask_filter_value"])
    return np.where(allowed, np.float32(0), blocked).astype(np.float32)[:, None, None, :]


def self_attention(node, qkv: np.ndarray, mask: np.ndarray | None, matmul) -> np.ndarray:
    """softmax(scale * Q K^T + mask) V over the heads of qkv [B, S, 3H] (float32), merged to [B, S, H]."""
    hidden = qkv.shape[2] // 3
    return multi_head(node, *(np.ascontiguousarray(qkv[..., i * hidden:(i + 1) * hidden]) for i in range(3)),
                      mask, matmul)


def multi_head(node, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, matmul) -> np.ndarray:
    """softmax(scale * Q K^T + mask) V over the ``num_heads`` heads of q [B, S, H], k [B, L, H] and v [B, L, Hv]
    (float32; scale 1/sqrt(H / heads) unless the node's ``scale``), merged to [B, S, Hv]; ``mask`` as
    ``key_bias`` takes it."""
    heads = node.attrs["num_heads"]
    batch, total = k.shape[:2]
    scale = np.float32(node.attrs["scale"] or 1.0 / np.sqrt(q.shape[2] // heads))
    q, k, v = (split_heads(x, heads) for x in (q, k, v))
    scores = matmul(q, k.transpose(0, 1, 3, 2)) * scale
    bias = key_bias(node, mask, batch, total)
    if bias is not None:
        scores += bias
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return merge_heads(matmul(scores, v))


class QAttentionKernel(FunctionKernel):
    op_type = "QAttention"
    # the QKV projection and the products; the cpu device's subclass runs them on its pool
    product = MatMulIntegerToFloatKernel()
    matmul = staticmethod(np.matmul)

    def compute(self, node, x, w, bias, x_scale, w_scale, mask=None, x_zero=None, w_zero=None, past=None):
        qkv = self.product.compute(node, x, w, np.asarray(x_scale, np.float32), w_scale, x_zero, w_zero, bias)
        return self_attention(node, qkv.astype(np.float32, copy=False), mask, self.matmul)


IMPLEMENTATIONS = (QAttentionKernel,)
