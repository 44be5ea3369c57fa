"""Range: start, start + delta, ... up to limit (exclusive)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype


def range_count(start: Any, limit: Any, delta: Any) -> int:
    """max(ceil((limit - start) / delta), 0), exact for integers."""
    if delta == 0:
        raise ValueError("delta is 0")
    if isinstance(start, int) and isinstance(limit, int) and isinstance(delta, int):
        return max(-((start - limit) // delta), 0)
    return max(math.ceil((limit - start) / delta), 0)


def scalars(*arrays: np.ndarray) -> list[Any]:
    """0-d or one-element arrays as Python numbers."""
    return [np.asarray(a).reshape(-1)[0].item() for a in arrays]


class Range(Prototype):
    op_type = "Range"
    versions = (11, 27)
    inputs = (3, 3)

    def attributes_for(self, version: int) -> dict[str, Any]:
        return {"stash_type": 1} if version >= 27 else {}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        dtypes = {i.dtype for i in ins if i.dtype is not None}
        if len(dtypes) > 1:
            raise self.fail(node, f"start, limit and delta have different dtypes {sorted(map(str, dtypes))}")
        dtype = dtypes.pop() if dtypes else None
        if all(i.value is not None for i in ins):
            try:
                return [Info(dtype, (range_count(*scalars(*(i.value for i in ins))),))]
            except ValueError as exc:
                raise self.fail(node, str(exc)) from exc
        return [Info(dtype, (None,))]
