"""Dropout: identity at inference (output = input, mask all true); random training mode is unsupported."""
from __future__ import annotations

from typing import Any

import numpy as np

from nnhal.errors import ModelError, UnsupportedError, where
from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype, same_as


def training_rejected(node: Node) -> UnsupportedError:
    """The error for Dropout in training mode with a ratio above 0 (a random op)."""
    return UnsupportedError(f"{where(node)} runs in training mode with ratio > 0, which is random; "
                            "nnhal runs Dropout in inference mode only (training_mode false or ratio 0)")


def scalar(value: np.ndarray) -> float:
    """The single element of a scalar (or one-element) tensor."""
    return float(np.asarray(value).reshape(-1)[0])


class Dropout(Prototype):
    op_type = "Dropout"
    versions = (1, 6, 7, 10, 12, 13, 22)
    inputs = (1, 3)
    outputs = (1, 2)

    def attributes_for(self, version: int) -> dict[str, Any]:
        if version < 7:
            return {"is_test": 0, "ratio": 0.5}
        if version < 12:
            return {"ratio": 0.5}
        return {"seed": None}

    def check(self, node: Node) -> None:
        if node.version < 12 and len([n for n in node.inputs if n]) > 1:
            raise ModelError(f"{where(node)}: Dropout-{node.version} takes one input")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        ratio = ins[1] if len(ins) > 1 else None
        training = ins[2] if len(ins) > 2 else None
        if ratio is not None and ratio.value is not None and not 0 <= scalar(ratio.value) < 1:
            raise self.fail(node, f"ratio must be in [0, 1), got {scalar(ratio.value)}")
        if training is not None and training.value is not None and scalar(training.value):
            if ratio is None or (ratio.value is not None and scalar(ratio.value) > 0):
                raise training_rejected(node)
        mask = np.dtype(np.bool_) if node.version >= 10 else x.dtype
        return [same_as(x), Info(mask, x.shape)]
