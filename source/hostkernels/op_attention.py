"""Attention on the CPU: batched matmuls over (batch, heads), one additive bias for every mask."""
from __future__ import annotations

import numpy as np

from nnhal.errors import ShapeError, where
from nnhal.hostkernels.base import Kernel, RunFn, store
from nnhal.operator.op_attention import softmax_dtype


def split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(B, S, H*D) -> (B, H, S, D)."""
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def merge_heads(y: np.ndarray) -> np.ndarray:
    """(B, H, S, D) -> (B, S, H*D)."""
    b, h, s, d = y.shape
    return y.transpose(0, 2, 1, 3).reshape(b, s, h * d)


def pad_mask(mask: np.ndarray, total: int) -> np.ndarray:
    """Pad the mask's key axis to ``total`` with False / -inf (keys beyond it are never attended)."""
    missing = total - mask.shape[-1]
    if missing <= 0:
        return mask
    fill = False if mask.dtype == np.bool_ else -np.inf
    return np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, missing)], constant_values=fill)


def attention_bias(node, dtype: np.dtype, mask: np.ndarray | None, q_len: int, total: int, past_len: int,
                   nonpad: np.ndarray | None) -> np.ndarray | None:
    """The additive bias (0 or -inf, plus a float mask) broadcastable to (B, Hq, Sq, total); None if none."""
    left = node.attrs.get("left_window_size", -1)
    right = node.attrs.get("right_window_size", -1)
    keys = np.arange(total)
    # NOTE: query i sits at absolute position i + offset: offset is the cached key count
    # (past_key), or per batch nonpad_kv_seqlen - q_len for an external cache.
    if nonpad is not None:
        position = np.arange(q_len)[:, None] + (nonpad.astype(np.int64) - q_len)[:, None, None, None]
    else:
        position = np.arange(q_len)[:, None] + past_len
    allowed = None

    def narrow(cond: np.ndarray) -> None:
        nonlocal allowed
        allowed = cond if allowed is None else allowed & cond

    if node.attrs["is_causal"]:
        narrow(keys <= position)
    if left >= 0:
        narrow(keys >= position - left)
    if right >= 0:
        narrow(keys <= position + right)
    if nonpad is not None:
        narrow(keys < nonpad.astype(np.int64)[:, None, None, None])
    bias = None
    if mask is not None:
        mask = pad_mask(mask, total)
        if mask.dtype == np.bool_:
            narrow(mask)
        else:
            bias = mask.astype(dtype)
    if allowed is not None:
        blocked = np.where(allowed, np.zeros((), dtype), np.array(-np.inf, dtype))
        bias = blocked if bias is None else bias + blocked
    return bias


def guarded_softmax(logits: np.ndarray, masked_rows: np.ndarray | None) -> np.ndarray:
    """Softmax over the last axis; rows whose every key is masked become zeros, not NaN."""
    top = np.max(logits, axis=-1, keepdims=True)
    top = np.where(np.isneginf(top), np.zeros((), logits.dtype), top)
    e = np.exp(logits - top)
    total = np.sum(e, axis=-1, keepdims=True)
    total = np.where(total == 0, np.ones((), logits.dtype), total)
    p = e / total
    if masked_rows is not None:
        p = np.where(masked_rows, np.zeros((), p.dtype), p)
    return p


def attend(node, inputs: list, matmul=np.matmul) -> list[np.ndarray]:
    """Y, present_key, present_value and qk_matmul_output (per qk_matmul_output_mode); ``matmul`` is the
    matrix product (numpy's, or a device's with its signature)."""
    q, k, v = inputs[0], inputs[1], inputs[2]
    mask, past_k, past_v, nonpad = (list(inputs) + [None] * 7)[3:7]
    three_d = q.ndim == 3
    if three_d:
        q_heads, kv_heads = node.attrs["q_num_heads"], node.attrs["kv_num_heads"]
        q, k, v = split_heads(q, q_heads), split_heads(k, kv_heads), split_heads(v, kv_heads)
    # NOTE: without a past cache the present key/value are K/V (or views of them); they
    # are copied because an output must never alias an input.
    present_k = k.copy() if past_k is None else np.concatenate([past_k, k], axis=2)
    present_v = v.copy() if past_v is None else np.concatenate([past_v, v], axis=2)
    q_len, total = q.shape[2], present_k.shape[2]
    groups, rest = divmod(q.shape[1], present_k.shape[1])
    if rest:
        raise ShapeError(f"{where(node)}: {q.shape[1]} query heads do not group over {present_k.shape[1]} key heads")
    dtype = q.dtype
    scale = node.attrs["scale"]
    root = dtype.type(np.sqrt(1.0 / np.sqrt(q.shape[3]) if scale is None else scale))
    keys = np.repeat(present_k, groups, axis=1) if groups > 1 else present_k
    values = np.repeat(present_v, groups, axis=1) if groups > 1 else present_v
    # NOTE: Q and K are each scaled by sqrt(scale) before the product, as the spec says.
    qk = matmul(q * root, np.swapaxes(keys * root, -1, -2)).astype(dtype, copy=False)
    softcap = float(node.attrs["softcap"])
    capped = softcap * np.tanh(qk / softcap) if softcap > 0 else qk
    past_len = 0 if past_k is None else past_k.shape[2]
    bias = attention_bias(node, dtype, mask, q_len, total, past_len, nonpad)
    logits = capped if bias is None else capped + bias
    masked_rows = None if bias is None else np.isneginf(np.max(bias, axis=-1, keepdims=True))
    probs = guarded_softmax(logits.astype(softmax_dtype(node, logits.dtype)), masked_rows)
    y = matmul(probs.astype(dtype), values)
    if three_d:
        y = merge_heads(y)
    return [y, present_k, present_v, (qk, capped, logits, probs)[node.attrs["qk_matmul_output_mode"]]]


class AttentionKernel(Kernel):
    op_type = "Attention"
    # the matrix product; the cpu device's subclass runs it on its pool (device/cpu/kernels/_pooled.py)
    matmul = staticmethod(np.matmul)

    def prepare(self, node, ins, outs) -> RunFn:
        dtypes = [o.dtype for o in outs]
        wanted = [bool(n) for n in node.outputs]

        def run(inputs, outputs):
            results = attend(node, inputs, self.matmul)
            return tuple(store(r, o, d) if want else None
                         for r, o, d, want in zip(results, outputs, dtypes, wanted))

        return run


IMPLEMENTATIONS = (AttentionKernel,)
