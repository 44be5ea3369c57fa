"""Attention on the cpu device: the host's kernel (hostkernels/op_attention.py) with its two products on
the pool."""
from __future__ import annotations

from nnhal.device.cpu.kernels._pooled import Pooled
from nnhal.hostkernels.op_attention import AttentionKernel


class AttentionPooled(Pooled, AttentionKernel):
    pass


IMPLEMENTATIONS = (AttentionPooled,)
