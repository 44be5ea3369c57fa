"""Shared prototypes of elementwise binary and variadic operators (Add, Less, Max, ...)."""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype, broadcast

BOOL = np.dtype(np.bool_)
NUMERIC = "iuf"


def common_dtype(node: Node, proto: Prototype, infos: list[Info | None]) -> np.dtype | None:
    """The one dtype all inputs share (None when none is known); fail on a mismatch."""
    known = {i.dtype for i in infos if i is not None and i.dtype is not None}
    if len(known) > 1:
        raise proto.fail(node, f"inputs have different dtypes {sorted(str(d) for d in known)}")
    return known.pop() if known else None


def check_kind(node: Node, proto: Prototype, dtype: np.dtype | None, kinds: str) -> None:
    """Fail when ``dtype`` is known and its numpy kind is not one of ``kinds``."""
    if dtype is not None and dtype.kind not in kinds:
        raise proto.fail(node, f"inputs of dtype {dtype} are not accepted")


class Binary(Prototype):
    """An elementwise op of two same-dtype inputs with numpy broadcasting.

    Subclasses set ``kinds`` (accepted numpy dtype kinds) and ``boolean``
    (True when the result is bool, as for comparisons).
    """

    inputs = (2, 2)
    kinds: ClassVar[str] = NUMERIC
    boolean: ClassVar[bool] = False

    def result_dtype(self, node: Node, a: Info, b: Info) -> np.dtype | None:
        dtype = common_dtype(node, self, [a, b])
        check_kind(node, self, dtype, self.kinds)
        return BOOL if self.boolean else dtype

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        a, b = ins
        dtype = self.result_dtype(node, a, b)
        return [Info(dtype, broadcast(node, a.shape, b.shape))]


class Variadic(Prototype):
    """An elementwise op of one or more same-dtype inputs with numpy broadcasting (Max, Sum...)."""

    inputs = (1, -1)
    kinds: ClassVar[str] = NUMERIC

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        if any(i is None for i in ins):
            raise ModelError(f"{where(node)} has an empty input name; every input is required")
        dtype = common_dtype(node, self, ins)
        check_kind(node, self, dtype, self.kinds)
        return [Info(dtype, broadcast(node, *(i.shape for i in ins)))]
