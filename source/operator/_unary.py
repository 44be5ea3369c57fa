"""Shared prototypes of the elementwise unary operators (dtype checks, same-shape outputs)."""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype, same_as

# numpy dtype kinds an operator accepts
FLOAT = "f"
SIGNED = "fi"
NUMERIC = "fiu"
INTEGER = "iu"
BOOL = "b"

_KIND_NAMES = {"f": "floating-point", "i": "signed integer", "u": "unsigned integer", "b": "bool"}


def check_kind(proto: Prototype, node: Node, info: Info | None, kinds: str | None, what: str = "input") -> None:
    """Fail when a known dtype is not of one of ``kinds`` (numpy dtype kinds)."""
    if kinds is None or info is None or info.dtype is None:
        return
    if np.dtype(info.dtype).kind not in kinds:
        expected = " or ".join(_KIND_NAMES[k] for k in kinds)
        raise proto.fail(node, f"{what} has dtype {info.dtype}; {node.op_type} takes {expected} tensors")


class Unary(Prototype):
    """An elementwise op whose output has the input's dtype and shape."""

    kinds: ClassVar[str | None] = FLOAT

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        check_kind(self, node, ins[0], self.kinds)
        return [same_as(ins[0])]


class Predicate(Unary):
    """An elementwise test: a bool output with the input's shape."""

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        check_kind(self, node, ins[0], self.kinds)
        return [Info(np.dtype(np.bool_), ins[0].shape)]
