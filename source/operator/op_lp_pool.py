"""LpPool: windowed p-norm (sum |x|^p)^(1/p)."""
from __future__ import annotations

from typing import Any

from nnhal.operator._nn import POOL_ATTRIBUTES, PoolPrototype
from nnhal.operator.base import REQUIRED


class LpPool(PoolPrototype):
    op_type = "LpPool"
    versions = (1, 2, 11, 18, 22)
    attributes = {**POOL_ATTRIBUTES, "kernel_shape": REQUIRED, "p": 2, "ceil_mode": 0, "dilations": None}

    def attributes_for(self, version: int) -> dict[str, Any]:
        if version == 1:
            # NOTE: LpPool-1 made kernel_shape optional (the whole spatial extent) and p a float.
            return {**self.attributes, "kernel_shape": None, "p": 2.0}
        return self.attributes
