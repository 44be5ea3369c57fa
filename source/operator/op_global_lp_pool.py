"""GlobalLpPool: p-norm over all spatial axes."""
from __future__ import annotations

from typing import Any

from nnhal.operator._nn import GlobalPoolPrototype


class GlobalLpPool(GlobalPoolPrototype):
    op_type = "GlobalLpPool"
    versions = (1, 2, 22)
    attributes = {"p": 2}

    def attributes_for(self, version: int) -> dict[str, Any]:
        return {"p": 2.0} if version == 1 else self.attributes
