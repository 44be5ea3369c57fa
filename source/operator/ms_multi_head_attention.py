"""MultiHeadAttention (com.microsoft): what onnxruntime's transformer optimizer writes for attention whose
projections stay outside (cross attention, encoder-decoder models): query (B, S, H*D), key (B, L, H*D), value
(B, L, H*Dv), an optional bias (the three projections' biases, concatenated) and key_padding_mask ([B] key
lengths or a [B, L] 0 / 1 mask, blocked keys get mask_filter_value). nnhal takes these plain 3-D cases: no
packed QKV, attention bias, past / present cache or causal (unidirectional) masking."""
from __future__ import annotations

import numpy as np

from nnhal.errors import UnsupportedError, where
from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype


class MultiHeadAttention(Prototype):
    op_type = "MultiHeadAttention"
    domain = "com.microsoft"
    versions = (1,)
    inputs = (1, 10)
    outputs = (1, 4)
    attributes = {"num_heads": 0, "unidirectional": 0, "mask_filter_value": -10000.0, "scale": 0.0}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        if node.attrs["unidirectional"]:
            raise UnsupportedError(f"{where(node)}: unidirectional=1 is not supported")
        if len(ins) < 3 or ins[1] is None or ins[2] is None or any(i is not None for i in ins[5:]) \
                or any(n for n in node.outputs[1:]):
            raise UnsupportedError(f"{where(node)}: only separate query, key and value with an optional bias and "
                                   "key_padding_mask are supported (no packed QKV, attention bias or key-value cache)")
        q, k, v = ins[:3]
        if any(i.dtype != np.float32 for i in (q, k, v)):
            raise UnsupportedError(f"{where(node)}: only float32 query, key and value are supported")
        heads = node.attrs["num_heads"]
        if heads <= 0:
            raise self.fail(node, f"num_heads must be positive, got {heads}")
        if q.shape is None or v.shape is None:
            return [Info(np.dtype(np.float32), None)]
        if any(i.shape is not None and len(i.shape) != 3 for i in (q, k, v)):
            raise UnsupportedError(f"{where(node)}: query, key and value must be 3-D (B, S, hidden)")
        for name, info in (("query", q), ("key", k), ("value", v)):
            if isinstance(info.shape[2], int) and info.shape[2] % heads:
                raise self.fail(node, f"{name}'s hidden size {info.shape[2]} is not a multiple of num_heads {heads}")
        return [Info(np.dtype(np.float32), (q.shape[0], q.shape[1], v.shape[2]))]
