"""Attention on the cpu device: the host's kernel (hostkernels/op_attention.py) with its two products on
the pool; and the fused attention step of the CPU plan (:class:`FusedAttentionNative`, device/cpu/attention_fuse.py)."""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.device.cpu.kernels._pooled import Pooled
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.op_attention import AttentionKernel


class AttentionPooled(Pooled, AttentionKernel):
    pass


IMPLEMENTATIONS = (AttentionPooled,)


class FusedAttentionNative(Kernel):
    """The CPU plan's fused attention step (device/cpu/attention_fuse.py): one native call (native/nn_attention.h)
    computes ``softmax(Q K^T * scale + mask) V`` for every (batch, head) of float32 operands of static shapes.

    The node's inputs are the arrays Q, K^T and V are read from and the additive mask (absent: none);
    ``views[k]`` (None: the array itself) makes operand k from its input without a copy (matmul_views.py's
    head-split views); with ``out_perm`` the node's output is the Transpose of the product by it, written through
    the inverse view. Operands of rank 3 get a leading axis of 1; the mask is broadcast to the scores' shape
    (a view: stride 0 where it broadcasts)."""

    op_type = "FusedAttention"
    name = "native attention"

    def __init__(self, views, out_perm, scale: float, scores: tuple[int, ...]):
        self.views, self.out_perm, self.scale, self.scores = list(views), out_perm, float(scale), tuple(scores)

    def score(self, node, ins, outs) -> int:
        return 10 if native.available() else 0

    def prepare(self, node, ins, outs) -> RunFn:
        views, scale = self.views, self.scale
        lead = (1,) * (4 - len(self.scores))
        scores4 = lead + self.scores
        inverse = None if self.out_perm is None else tuple(int(i) for i in np.argsort(self.out_perm))
        units = int(np.prod(scores4[:2])) * -(-scores4[2] // 16)
        work = int(np.prod(scores4)) * 4 * 8
        shape = tuple(outs[0].shape)

        def operand(x, k):
            x = x if views[k] is None else views[k](x)
            x = x.reshape(lead + x.shape) if lead else x
            rows = x.shape[-2] < 2 or x.strides[-2] >= 4 * x.shape[-1]       # BLAS's leading dimension
            return x if x.strides[-1] == 4 and rows else np.ascontiguousarray(x)

        def run(inputs, outputs):
            parts = parallel.native_parts(work, units) if parallel.native_pool() else 1
            q, v = operand(inputs[0], 0), operand(inputs[2], 2)
            kt = inputs[1] if views[1] is None else views[1](inputs[1])
            kt = kt.reshape(lead + kt.shape) if lead else kt
            k, flag = kt.swapaxes(-1, -2), 0
            if k.strides[-1] != 4 or (k.shape[-2] > 1 and k.strides[-2] < 4 * k.shape[-1]):
                k, flag = (kt, 1) if kt.strides[-1] == 4 and (kt.shape[-2] < 2 or kt.strides[-2] >= 4 * kt.shape[-1]) \
                    else (np.ascontiguousarray(k), 0)
            mask = inputs[3] if len(inputs) > 3 else None
            if mask is not None:
                mask = np.broadcast_to(mask.reshape((1,) * (4 - mask.ndim) + mask.shape), scores4)
                if mask.strides[-1] != 4:
                    mask = np.ascontiguousarray(mask)
            y = outputs[0] if outputs[0] is not None else np.empty(shape, np.float32)
            o = y if inverse is None else y.transpose(inverse)
            native.attention(q, k, v, mask, o.reshape(lead + o.shape) if lead else o, scale, flag, parts)
            return (y,)

        return run
