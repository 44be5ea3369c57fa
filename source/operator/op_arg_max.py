"""ArgMax: int64 index of the largest element along an axis."""
from __future__ import annotations

from nnhal.operator._reduce import ArgPrototype


class ArgMax(ArgPrototype):
    op_type = "ArgMax"
