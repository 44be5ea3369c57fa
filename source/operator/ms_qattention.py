"""QAttention (com.microsoft): the QKV projection of quantized input and weights (an exact integer product,
dequantized with input_scale * weight_scale, plus a float bias), then multi-head self-attention in float;
what onnxruntime's quantize_dynamic wrote for BERT-style Attention nodes."""
from __future__ import annotations

import numpy as np

from nnhal.errors import UnsupportedError, where
from nnhal.graph.node import Node
from nnhal.operator._qrc import EIGHT_BIT, check_quant_dtype
from nnhal.operator.base import Info, Prototype


class QAttention(Prototype):
    op_type = "QAttention"
    domain = "com.microsoft"
    versions = (1,)
    inputs = (5, 9)
    attributes = {"num_heads": 0, "unidirectional": 0, "mask_filter_value": -10000.0, "scale": 0.0,
                  "do_rotary": 0, "past_present_share_buffer": 0}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, w = ins[0], ins[1]
        check_quant_dtype(node, x.dtype, "input", EIGHT_BIT)
        check_quant_dtype(node, w.dtype, "weight", EIGHT_BIT)
        for what, flag in (("unidirectional", "unidirectional"), ("do_rotary", "do_rotary")):
            if node.attrs[flag]:
                raise UnsupportedError(f"{where(node)}: {what}=1 is not supported; nnhal runs bidirectional "
                                       "QAttention without rotary embeddings")
        if len(ins) > 8 and ins[8] is not None or len(node.outputs) > 1 and node.outputs[1]:
            raise UnsupportedError(f"{where(node)}: past / present (a key-value cache) is not supported")
        return packed_attention(self, node, x, w)


def packed_attention(proto: Prototype, node: Node, x: Info, w: Info) -> list[Info]:
    """The float32 (B, S, H) output of an attention over the packed QKV projection x (B, S, K) x w (K, 3H) with
    ``num_heads`` heads (QAttention, com.microsoft Attention), its shapes checked."""
    heads = node.attrs["num_heads"]
    if heads <= 0:
        raise proto.fail(node, f"num_heads must be positive, got {heads}")
    if x.shape is None or w.shape is None:
        return [Info(np.dtype(np.float32), None)]
    if len(x.shape) != 3 or len(w.shape) != 2 or x.shape[2] != w.shape[0]:
        raise proto.fail(node, f"input {x.shape} and weight {w.shape} do not make a [B, S, K] x [K, 3H] product")
    if w.shape[1] is not None and (w.shape[1] % 3 or (w.shape[1] // 3) % heads):
        raise proto.fail(node, f"weight's {w.shape[1]} columns are not 3 x num_heads ({heads}) x a head size")
    hidden = None if w.shape[1] is None else w.shape[1] // 3
    return [Info(np.dtype(np.float32), (x.shape[0], x.shape[1], hidden))]
