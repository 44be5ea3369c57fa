"""Constant: a tensor given as an attribute. Folded into a constant at import."""
from __future__ import annotations

import numpy as np

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype

_KINDS = {
    "value": None,
    "value_float": np.float32,
    "value_floats": np.float32,
    "value_int": np.int64,
    "value_ints": np.int64,
    "value_string": object,
    "value_strings": object,
}


class Constant(Prototype):
    op_type = "Constant"
    versions = (1, 9, 11, 12, 13, 19, 21, 23, 24, 25)
    inputs = (0, 0)

    def check(self, node: Node) -> None:
        given = [k for k in node.attrs if k in _KINDS]
        if len(given) != 1:
            raise ModelError(f"{where(node)} must have exactly one of {sorted(_KINDS)}; it has {given or 'none'}")

    def value(self, node: Node) -> np.ndarray:
        """The constant's value as an array."""
        for key, dtype in _KINDS.items():
            if key in node.attrs:
                v = node.attrs[key]
                return np.asarray(v) if dtype is None else np.asarray(v, dtype=dtype)
        if "sparse_value" in node.attrs:
            raise ModelError(f"{where(node)} holds a sparse tensor, which nnhal does not support")
        raise ModelError(f"{where(node)} has no value")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        return [Info.of(self.value(node))]
