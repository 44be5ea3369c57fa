"""GlobalMaxPool: maximum over all spatial axes."""
from __future__ import annotations

from nnhal.operator._nn import GlobalPoolPrototype


class GlobalMaxPool(GlobalPoolPrototype):
    op_type = "GlobalMaxPool"
    versions = (1, 22)
