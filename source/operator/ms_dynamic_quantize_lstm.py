"""DynamicQuantizeLSTM (com.microsoft): an LSTM whose W (D, I, 4H) and R (D, H, 4H) are 8-bit integers with
per-direction or per-column scales and zero points (inputs 8-11); onnxruntime's dynamic quantization writes it
for every LSTM (the default text recognizer of a popular OCR package ships it)."""
from __future__ import annotations

from typing import Any

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator.base import Info
from nnhal.operator.op_lstm import LSTM


def float_view(w: Info | None) -> Info | None:
    """The Info of the float LSTM operand (D, 4H, K) that a quantized (D, K, 4H) one stands for."""
    if w is None:
        return None
    shape = None if w.shape is None else (w.shape[0], w.shape[2], w.shape[1])
    return Info(np.dtype(np.float32), shape)


class DynamicQuantizeLSTM(LSTM):
    op_type = "DynamicQuantizeLSTM"
    domain = "com.microsoft"
    versions = (1,)
    inputs = (12, 12)

    def attributes_for(self, version: int) -> dict[str, Any]:
        return {"activation_alpha": None, "activation_beta": None, "activations": None, "clip": None,
                "direction": "forward", "hidden_size": None, "input_forget": 0}

    def hidden(self, node: Node, ins: list[Info | None]) -> int | None:
        if node.attrs["hidden_size"] is not None:
            return int(node.attrs["hidden_size"])
        r = ins[2]
        return r.shape[1] if r is not None and r.shape is not None and len(r.shape) == 3 else None

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        for name, i in (("W", 1), ("R", 2)):
            if ins[i].dtype is not None and ins[i].dtype not in (np.int8, np.uint8):
                raise self.fail(node, f"{name} must be int8 or uint8, got {ins[i].dtype}")
        return super().infer(node, [ins[0], float_view(ins[1]), float_view(ins[2]), *ins[3:8]])
