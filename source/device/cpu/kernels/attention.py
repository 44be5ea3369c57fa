"""Attention on the cpu device: the host's kernel (hostkernels/op_attention.py) with its two products on
the pool; the com.microsoft Attention and MultiHeadAttention ops on the native step; and the fused attention
step of the CPU plan (:class:`FusedAttentionNative`, device/cpu/attention_fuse.py)."""
from __future__ import annotations

from functools import partial

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.device.cpu.kernels._pooled import Pooled
from nnhal.device.cpu.kernels.matmul import native_rows
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.ms_attention import projection
from nnhal.hostkernels.ms_multi_head_attention import with_bias
from nnhal.hostkernels.ms_qattention import key_bias
from nnhal.hostkernels.op_attention import AttentionKernel, attention_bias


class AttentionPooled(Pooled, AttentionKernel):
    pass


class AttentionNative(Kernel):
    """The ONNX Attention op (opset 23) on the native attention step (native/nn_attention.h) where it is plain
    scaled-dot-product attention: float32 of static shapes, Q, K and V 4-D, or 3-D, with a number of key/value
    heads dividing the query's (grouped-query attention: kv head h // g, read in place), no past cache or non-pad
    lengths, no softcap, window or softmax precision, only output Y wanted. ``is_causal`` and an attn_mask (bool
    or float32) become the host kernel's additive bias (hostkernels/op_attention.py ``attention_bias``), read as a
    broadcast view; rows whose every key is masked (-inf) are written as the op's zeros after the native call
    (the native softmax gives NaN there). The 3-D operands are head-split views and Y is written through the
    merged view. Scores are scale * (q . k) instead of (q sqrt(scale)) . (k sqrt(scale)): roundings only."""

    op_type = "Attention"
    name = "native"

    def score(self, node, ins, outs) -> int:
        if not native.available() or len(ins) < 3 or any(i is None or i.dtype != np.float32 or not i.static
                                                          for i in ins[:3]):
            return 0
        a = node.attrs
        mask = ins[3] if len(ins) > 3 else None
        if mask is not None and (mask.dtype not in (np.bool_, np.float32) or not mask.static):
            return 0
        if any(i is not None for i in ins[4:]) or any(n for n in node.outputs[1:]) or a.get("softcap", 0.0) \
                or a.get("softmax_precision") is not None or a.get("qk_matmul_output_mode", 0) \
                or a.get("left_window_size", -1) != -1 or a.get("right_window_size", -1) != -1:
            return 0
        rank = len(ins[0].shape)
        if rank not in (3, 4) or any(len(i.shape) != rank for i in ins[1:3]) or 0 in ins[0].shape \
                or 0 in ins[1].shape:
            return 0
        if rank == 3:
            q, kv = a.get("q_num_heads"), a.get("kv_num_heads")
            if not q or not kv or q % kv or ins[0].shape[2] % q or ins[1].shape[2] % kv or ins[2].shape[2] % kv:
                return 0
        elif ins[0].shape[1] % ins[1].shape[1] or ins[1].shape[1] != ins[2].shape[1]:
            return 0
        return 20

    def prepare(self, node, ins, outs) -> RunFn:
        rank = len(ins[0].shape)
        heads = node.attrs.get("q_num_heads") if rank == 3 else None
        kv_heads = node.attrs.get("kv_num_heads") if rank == 3 else None
        q_len, total = ins[0].shape[-2 if rank == 4 else 1], ins[1].shape[-2 if rank == 4 else 1]
        depth = ins[0].shape[-1] // heads if rank == 3 else ins[0].shape[-1]
        scale = node.attrs.get("scale")
        scale = float(1.0 / np.sqrt(depth) if scale is None else scale)
        batch = ins[0].shape[0]
        scores = (batch, heads or ins[0].shape[1], q_len, total)
        units = batch * scores[1] * -(-q_len // 16)
        work = units * 16 * total * 4 * 8
        shape = tuple(outs[0].shape)

        def split(x, n_heads):
            b, n, hidden = x.shape
            return x.reshape(b, n, n_heads, hidden // n_heads).transpose(0, 2, 1, 3)

        def additive(mask):
            """(the bias as the step reads it, its fully masked rows), or (None, None)."""
            bias = attention_bias(node, np.dtype(np.float32), mask, q_len, total, 0, None)
            if bias is None:
                return None, None
            blocked = np.broadcast_to(np.isneginf(bias).all(axis=-1), scores[:3])
            bias = np.broadcast_to(bias, scores)
            return (bias if bias.strides[-1] == 4 else np.ascontiguousarray(bias)), blocked

        # without a mask input the bias (causal or none) is the same every run: made once (read-only views)
        fixed = additive(None) if len(ins) < 4 or ins[3] is None else None

        def run(inputs, outputs):
            parts = parallel.native_parts(work, units) if parallel.native_pool() else 1
            q, k, v = inputs[:3]
            if heads:
                q, k, v = split(q, heads), split(k, kv_heads), split(v, kv_heads)
            bias, blocked = fixed or additive(inputs[3])
            y = outputs[0] if outputs[0] is not None else np.empty(shape, np.float32)
            o = split(y, heads) if heads else y
            native.attention(q, k, v, bias, o, scale, 0, parts)
            if blocked is not None and blocked.any():
                o[blocked] = 0.0
            return (y,) + (None,) * (len(outputs) - 1)

        return run


class _MsNative(Kernel):
    """The com.microsoft attention ops on the native attention step (native/nn_attention.h), float32 of static
    shapes: the heads of (B, S, H*D) query, key and value are strided views, the output is written through the
    (B, S, H*Dv) view, and the optional key mask (ms_qattention.py ``key_bias``: [B] key lengths or a [B, L]
    0 / 1 mask, mask_filter_value where blocked) is the additive (B, 1, 1, L) mask, read broadcast."""

    name = "native"

    def score(self, node, ins, outs) -> int:
        given = [(n, i) for n, i in enumerate(ins) if i is not None]
        if not native.available() or any(not i.static or n != self.mask_at and i.dtype != np.float32
                                         for n, i in given):
            return 0
        return 20 if self.op_type != "MultiHeadAttention" or ins[0].shape[2] == ins[1].shape[2] else 0

    def qkv(self, inputs) -> tuple:
        """(q, k, v) as (B, S, H) float32 arrays of the inputs."""
        raise NotImplementedError

    def dims(self, ins) -> tuple[int, int]:
        """(q's hidden size, the key length) from the static input shapes, for the scale and the split at prepare."""
        raise NotImplementedError

    def prepare(self, node, ins, outs) -> RunFn:
        heads, shape = node.attrs["num_heads"], tuple(outs[0].shape)
        batch, seq = shape[:2]
        mask_at = self.mask_at

        def split(x):
            b, n, hidden = x.shape
            return x.reshape(b, n, heads, hidden // heads).transpose(0, 2, 1, 3)

        q_hidden, total = self.dims(ins)
        scale = float(node.attrs["scale"] or 1.0 / np.sqrt(q_hidden // heads))
        units = batch * heads * -(-seq // 16)
        work = units * 16 * total * 4 * 8

        def run(inputs, outputs):
            q, k, v = self.qkv(inputs)
            mask = inputs[mask_at] if len(inputs) > mask_at else None
            bias = key_bias(node, mask, batch, total)
            if bias is not None:
                bias = np.broadcast_to(bias, (batch, heads, seq, total))
            parts = parallel.native_parts(work, units) if parallel.native_pool() else 1
            y = outputs[0] if outputs[0] is not None else np.empty(shape, np.float32)
            native.attention(split(q), split(k), split(v), bias, split(y), scale, 0, parts)
            return (y,)

        return run


class MsAttentionNative(_MsNative):
    """com.microsoft Attention: the QKV projection (hostkernels/ms_attention.py ``projection``), then the native
    step on the three column blocks of the packed QKV as views."""

    op_type = "Attention"
    mask_at = 3
    matmul = staticmethod(np.matmul)

    def dims(self, ins) -> tuple[int, int]:
        return ins[1].shape[1] // 3, ins[0].shape[1]

    def qkv(self, inputs) -> tuple:
        qkv = projection(inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None, self.matmul)
        hidden = qkv.shape[2] // 3
        return tuple(qkv[..., i * hidden:(i + 1) * hidden] for i in range(3))


class MultiHeadAttentionNative(_MsNative):
    """com.microsoft MultiHeadAttention: the optional bias added (hostkernels/ms_multi_head_attention.py
    ``with_bias``), then the native step."""

    op_type = "MultiHeadAttention"
    mask_at = 4

    def dims(self, ins) -> tuple[int, int]:
        return ins[0].shape[2], ins[1].shape[1]

    def qkv(self, inputs) -> tuple:
        q, k, v = (np.asarray(x) for x in inputs[:3])
        return with_bias(q, k, v, inputs[3] if len(inputs) > 3 else None)


IMPLEMENTATIONS = (AttentionPooled, AttentionNative)
DOMAINS = {"com.microsoft": (MsAttentionNative, MultiHeadAttentionNative)}


class FusedAttentionNative(Kernel):
    """The CPU plan's fused attention step (device/cpu/attention_fuse.py): one native call (native/nn_attention.h)
    computes ``softmax(Q K^T * scale + mask) V`` for every (batch, head) of float32 operands of static shapes.

    The node's inputs are the arrays Q, K^T and V are read from and the additive mask (absent: none);
    ``views[k]`` (None: the array itself) makes operand k from its input without a copy (matmul_views.py's
    head-split views); with ``out_perm`` the node's output is the Transpose of the product by it, written through
    the inverse view. Operands of rank 3 get a leading axis of 1; the mask is broadcast to the scores' shape
    (a view: stride 0 where it broadcasts). With ``where`` (fill, kept), the mask input is a boolean condition
    (a Where's, known at run time) and the additive mask is made from it each run, 0 where the condition equals
    kept and fill elsewhere, at the condition's own (broadcasting) shape; with a finite fill, a query row whose
    keys are all masked gets what Where then Softmax give it, the mean of the values (uniform weights).
    K and V may have fewer heads than Q (a divisor: grouped-query attention, query head h reads kv head h // g,
    g the ratio), as the views give them."""

    op_type = "FusedAttention"
    name = "native attention"

    def __init__(self, views, out_perm, scale: float, scores: tuple[int, ...], where: tuple | None = None):
        self.views, self.out_perm, self.scale, self.scores = list(views), out_perm, float(scale), tuple(scores)
        self.where = where

    def score(self, node, ins, outs) -> int:
        return 10 if native.available() else 0

    def prepare(self, node, ins, outs) -> RunFn:
        views, scale, where = self.views, self.scale, self.where
        lead = (1,) * (4 - len(self.scores))
        scores4 = lead + self.scores
        inverse = None if self.out_perm is None else tuple(int(i) for i in np.argsort(self.out_perm))
        units = int(np.prod(scores4[:2])) * -(-scores4[2] // 16)
        work = int(np.prod(scores4)) * 4 * 8
        shape = tuple(outs[0].shape)

        def operand(x, k):
            x = x if views[k] is None else views[k](x)
            x = x.reshape(lead + x.shape) if lead else x
            return x if native_rows(x) else np.ascontiguousarray(x)

        def run(inputs, outputs):
            parts = parallel.native_parts(work, units) if parallel.native_pool() else 1
            q, v = operand(inputs[0], 0), operand(inputs[2], 2)
            kt = inputs[1] if views[1] is None else views[1](inputs[1])
            kt = kt.reshape(lead + kt.shape) if lead else kt
            k, flag = kt.swapaxes(-1, -2), 0
            if not native_rows(k):
                k, flag = (kt, 1) if native_rows(kt) else (np.ascontiguousarray(k), 0)
            mask, full = inputs[3] if len(inputs) > 3 else None, None
            if mask is not None and where is not None:
                kept = mask.reshape((1,) * (4 - mask.ndim) + mask.shape) == where[1]
                mask = np.where(kept, np.float32(0.0), np.float32(where[0]))
                if where[0] != -np.inf:
                    full = ~kept.any(axis=-1)
            if mask is not None:
                mask = np.broadcast_to(mask.reshape((1,) * (4 - mask.ndim) + mask.shape), scores4)
                if mask.strides[-1] != 4:
                    mask = np.ascontiguousarray(mask)
            y = outputs[0] if outputs[0] is not None else np.empty(shape, np.float32)
            o = y if inverse is None else y.transpose(inverse)
            o = o.reshape(lead + o.shape) if lead else o
            native.attention(q, k, v, mask, o, scale, flag, parts)
            if full is not None and full.any():
                rows = np.broadcast_to(full, o.shape[:3])
                mean = np.repeat(v.mean(axis=-2, dtype=np.float32), o.shape[1] // v.shape[1], axis=1)
                o[rows] = np.broadcast_to(mean[:, :, None, :], o.shape)[rows]
            return (y,)

        def bind(inputs, outputs):
            # NOTE: a planned step (straight.bind): the operands' views made once, the native call on them; only
            # where no operand needs a copy (a bound call reads its operands where they lie) and the mask is used
            # as it is (a Where's condition is made into a mask per run)
            y = outputs[0]
            if where is not None or y is None or y.shape != shape or y.dtype != np.float32 \
                    or any(x is None or x.dtype != np.float32 for x in inputs[:3]):
                return None
            q, v = (inputs[k] if views[k] is None else views[k](inputs[k]) for k in (0, 2))
            kt = inputs[1] if views[1] is None else views[1](inputs[1])
            q, v, kt = (x.reshape(lead + x.shape) if lead else x for x in (q, v, kt))
            k, flag = kt.swapaxes(-1, -2), 0
            if not native_rows(k):
                k, flag = kt, 1
            mask = inputs[3] if len(inputs) > 3 else None
            if mask is not None:
                mask = np.broadcast_to(mask.reshape((1,) * (4 - mask.ndim) + mask.shape), scores4)
            o = y if inverse is None else y.transpose(inverse)
            o = o.reshape(lead + o.shape) if lead else o
            views_of = ((q, inputs[0]), (kt, inputs[1]), (v, inputs[2]), (o, y)) \
                + (((mask, inputs[3]),) if mask is not None else ())
            if not (native_rows(q) and native_rows(v) and native_rows(k)) \
                    or not all(np.may_share_memory(view, of) for view, of in views_of) \
                    or (mask is not None and (mask.dtype != np.float32 or mask.strides[-1] != 4)):
                return None
            parts = parallel.native_parts(work, units) if parallel.native_pool() else 1
            return partial(native.attention, q, k, v, mask, o, scale, flag, parts)

        run.bind = bind
        return run
