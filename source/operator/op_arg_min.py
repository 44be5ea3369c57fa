"""ArgMin: int64 index of the smallest element along an axis."""
from __future__ import annotations

from nnhal.operator._reduce import ArgPrototype


class ArgMin(ArgPrototype):
    op_type = "ArgMin"
