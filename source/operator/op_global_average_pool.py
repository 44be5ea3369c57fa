"""GlobalAveragePool: mean over all spatial axes."""
from __future__ import annotations

from nnhal.operator._nn import GlobalPoolPrototype


class GlobalAveragePool(GlobalPoolPrototype):
    op_type = "GlobalAveragePool"
    versions = (1, 22)
