"""Attention (com.microsoft): the float form of QAttention, what onnxruntime's transformer optimizer writes for
BERT-style self-attention: the QKV projection input (B, S, K) x weights (K, 3H) + bias (3H), then multi-head
attention with an optional mask_index ([B] key lengths or a [B, S] 0 / 1 mask). nnhal takes the plain cases:
bidirectional, no past / present, attention bias, rotary or unequal qkv_hidden_sizes."""
from __future__ import annotations

import numpy as np

from nnhal.errors import UnsupportedError, where
from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype
from nnhal.operator.ms_qattention import packed_attention


class Attention(Prototype):
    op_type = "Attention"
    domain = "com.microsoft"
    versions = (1,)
    inputs = (2, 8)
    attributes = {"num_heads": 0, "unidirectional": 0, "mask_filter_value": -10000.0, "scale": 0.0,
                  "do_rotary": 0, "past_present_share_buffer": 0, "qkv_hidden_sizes": [], "rotary_embedding_dim": 0}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, w = ins[0], ins[1]
        for flag in ("unidirectional", "do_rotary", "past_present_share_buffer"):
            if node.attrs[flag]:
                raise UnsupportedError(f"{where(node)}: {flag}=1 is not supported; nnhal runs bidirectional "
                                       "Attention without rotary embeddings or a key-value cache")
        sizes = list(node.attrs["qkv_hidden_sizes"] or [])
        if any(i is not None for i in ins[4:]) or any(n for n in node.outputs[1:]) or len(set(sizes)) > 1:
            raise UnsupportedError(f"{where(node)}: past / present, attention_bias, past_sequence_length and "
                                   "unequal qkv_hidden_sizes are not supported")
        if x.dtype != np.float32 or w.dtype != np.float32:
            raise UnsupportedError(f"{where(node)}: only float32 input and weights are supported")
        return packed_attention(self, node, x, w)
