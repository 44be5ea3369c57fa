"""Attention (com.microsoft, float) on the host: the QKV projection x @ W + bias in float32, then
ms_qattention.py's self-attention (onnxruntime's order: softmax(scale * Q K^T + mask) V per head)."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import FunctionKernel
from nnhal.hostkernels.ms_qattention import self_attention


def projection(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, matmul) -> np.ndarray:
    """x @ w (+ bias) in float32: the packed (B, S, 3H) QKV."""
    qkv = matmul(x, w)
    if bias is not None:
        qkv += bias
    return qkv


class MsAttentionKernel(FunctionKernel):
    op_type = "Attention"
    matmul = staticmethod(np.matmul)

    def compute(self, node, x, w, bias=None, mask=None, *rest):
        return self_attention(node, projection(x, w, bias, self.matmul), mask, self.matmul)


IMPLEMENTATIONS = (MsAttentionKernel,)
