"""MultiHeadAttention (com.microsoft) on the host: the optional bias added to query, key and value, then
ms_qattention.py's multi-head attention (softmax(scale * Q K^T + key mask) V per head, merged)."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import FunctionKernel
from nnhal.hostkernels.ms_qattention import multi_head


def with_bias(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray | None) -> tuple:
    """q, k and v plus their parts of the concatenated bias (H_q + H_k + H_v), as given without one."""
    if bias is None:
        return q, k, v
    hq, hk = q.shape[-1], k.shape[-1]
    return q + bias[:hq], k + bias[hq:hq + hk], v + bias[hq + hk:]


class MultiHeadAttentionKernel(FunctionKernel):
    op_type = "MultiHeadAttention"
    matmul = staticmethod(np.matmul)

    def compute(self, node, q, k, v, bias=None, mask=None, *rest):
        return multi_head(node, *with_bias(q, k, v, bias), mask, self.matmul)


IMPLEMENTATIONS = (MultiHeadAttentionKernel,)
