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

    The node's inputs are the sources of Q, K^T, V and the additive mask (absent: no mask); ``attrs`` holds
    ``perms`` (per input, the Transpose taken as a view at run time, or None), ``out_perm`` (the Transpose of
    the product that the node's output is, or None) and ``scale``. Q, K^T and V of rank 3 get a leading axis
    of 1; the mask is broadcast to the scores' shape (a view: stride 0 where it broadcasts)."""

    op_type = "FusedAttention"
    name = "native attention"

    def score(self, node, ins, outs) -> int:
        return 10 if native.available() else 0

    def prepare(self, node, ins, outs) -> RunFn:
        perms, out_perm = node.attrs["perms"], node.attrs["out_perm"]
        scale, rank = float(node.attrs["scale"]), int(node.attrs["rank"])
        scores = tuple(node.attrs["scores"])
        lead = (1,) * (4 - rank)
        scores4 = lead + scores
        inverse = None if out_perm is None else tuple(int(i) for i in np.argsort(out_perm))
        units = int(np.prod(scores4[:2])) * -(-scores4[2] // 32)
        work = int(np.prod(scores4)) * 4 * 8
        const_mask = None
        if len(node.inputs) > 3 and node.inputs[3] and ins[3].value is not None:
            const_mask = np.asarray(ins[3].value, np.float32)

        def view(x, perm):
            x = x if perm is None else x.transpose(perm)
            return x.reshape(lead + x.shape) if lead else x

        def run(inputs, outputs):
            parts = parallel.native_parts(work, units) if parallel.native_pool() else 1
            q, kt, v = (view(inputs[i], perms[i]) for i in range(3))
            if q.strides[-1] != 4:
                q = np.ascontiguousarray(q)
            if v.strides[-1] != 4:
                v = np.ascontiguousarray(v)
            k, flag = kt.swapaxes(-1, -2), 0
            if k.strides[-1] != 4:
                k, flag = (kt, 1) if kt.strides[-1] == 4 else (np.ascontiguousarray(k), 0)
            mask = None
            if len(inputs) > 3 and inputs[3] is not None:
                m = const_mask if const_mask is not None else inputs[3]
                mask = np.broadcast_to(m.reshape((1,) * (4 - m.ndim) + m.shape), scores4)
                if mask.strides[-1] != 4:
                    mask = np.ascontiguousarray(mask)
            y = outputs[0]
            if y is None:
                y = np.empty(outs[0].shape, np.float32)
            o = y if inverse is None else y.transpose(inverse)
            o = o.reshape(lead + o.shape) if lead else o
            native.attention(q, k, v, mask, o, scale, flag, parts)
            return (y,)

        return run
