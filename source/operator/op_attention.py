"""Attention: scaled dot-product attention (MHA, GQA, MQA) with masks, KV cache, softcap and windows."""
from __future__ import annotations

from typing import Any

import numpy as np

from nnhal.errors import ModelError, ShapeError, UnsupportedTypeError, where
from nnhal.graph.dtypes import to_numpy
from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype

SOFTMAX_PRECISIONS = (1, 10, 11)  # float, float16, double (bfloat16 has no numpy type)


def _mul(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a * b


def _div(node: Node, a: int | None, b: int, what: str) -> int | None:
    if a is None:
        return None
    if a % b:
        raise ShapeError(f"{where(node)}: {what} {a} is not a multiple of {b} heads")
    return a // b


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


class Attention(Prototype):
    op_type = "Attention"
    versions = (23, 24, 25)
    inputs = (3, 7)
    outputs = (1, 4)

    def attributes_for(self, version: int) -> dict[str, Any]:
        base = {"is_causal": 0, "kv_num_heads": None, "q_num_heads": None, "qk_matmul_output_mode": 0,
                "scale": None, "softcap": 0.0, "softmax_precision": None}
        if version >= 25:
            base.update(left_window_size=-1, right_window_size=-1)
        return base

    def check(self, node: Node) -> None:
        if node.version < 24 and node.has_input(6):
            raise ModelError(f"{where(node)}: nonpad_kv_seqlen is an input from opset 24 on")
        if node.has_input(4) != node.has_input(5):
            raise ModelError(f"{where(node)}: past_key and past_value must be given together")
        if node.has_input(6) and node.has_input(4):
            raise ModelError(f"{where(node)}: nonpad_kv_seqlen cannot be combined with past_key/past_value")
        mode = node.attrs["qk_matmul_output_mode"]
        if mode not in (0, 1, 2, 3):
            raise ModelError(f"{where(node)}: qk_matmul_output_mode must be 0 to 3, got {mode}")
        if any(node.attrs.get(k, -1) < -1 for k in ("left_window_size", "right_window_size")):
            raise ModelError(f"{where(node)}: window sizes must be -1 or >= 0")
        precision = node.attrs["softmax_precision"]
        if precision is not None and precision not in SOFTMAX_PRECISIONS:
            raise UnsupportedTypeError(f"{where(node)}: softmax_precision {precision} is not supported "
                                       "(float, float16 and double are)")

    def heads(self, node: Node, rank: int) -> tuple[int | None, int | None]:
        """(q_num_heads, kv_num_heads) for 3-D inputs; (None, None) for 4-D ones."""
        if rank == 4:
            return None, None
        q, kv = node.attrs["q_num_heads"], node.attrs["kv_num_heads"]
        if not q or not kv or q < 1 or kv < 1:
            raise ModelError(f"{where(node)}: 3-D inputs need q_num_heads and kv_num_heads")
        return q, kv

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        q, k, v = ins[0], ins[1], ins[2]
        past = ins[4] if len(ins) > 4 else None
        dtypes = [q.dtype, k.dtype, v.dtype, q.dtype]
        if q.shape is None or k.shape is None or v.shape is None:
            return [Info(d, None) for d in dtypes]
        rank = len(q.shape)
        if rank not in (3, 4) or len(k.shape) != rank or len(v.shape) != rank:
            raise self.fail(node, f"Q, K, V must all be 3-D or all 4-D, got {q.shape}, {k.shape}, {v.shape}")
        q_heads, kv_heads = self.heads(node, rank)
        if rank == 4:
            batch, q_heads, q_len, _ = q.shape
            _, kv_heads, kv_len, k_size = k.shape
            v_size = v.shape[3]
        else:
            batch, q_len = q.shape[:2]
            kv_len = k.shape[1]
            _div(node, q.shape[2], q_heads, "Q hidden size")
            k_size = _div(node, k.shape[2], kv_heads, "K hidden size")
            v_size = _div(node, v.shape[2], kv_heads, "V hidden size")
        if q_heads is not None and kv_heads is not None and q_heads % kv_heads:
            raise self.fail(node, f"q_num_heads {q_heads} is not a multiple of kv_num_heads {kv_heads}")
        past_len = 0 if past is None else (None if past.shape is None else past.shape[2])
        total = _add(past_len, kv_len)
        y_shape = (batch, q_heads, q_len, v_size) if rank == 4 else (batch, q_len, _mul(q_heads, v_size))
        return [Info(dtypes[0], y_shape), Info(dtypes[1], (batch, kv_heads, total, k_size)),
                Info(dtypes[2], (batch, kv_heads, total, v_size)), Info(dtypes[3], (batch, q_heads, q_len, total))]


def softmax_dtype(node: Node, default: np.dtype) -> np.dtype:
    """The dtype the softmax runs in: softmax_precision when given, else ``default``."""
    precision = node.attrs["softmax_precision"]
    return default if precision is None else to_numpy(precision)
