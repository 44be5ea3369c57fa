"""AveragePool: windowed mean, with or without the padding in the divisor."""
from __future__ import annotations

from nnhal.operator._nn import POOL_ATTRIBUTES, PoolPrototype
from nnhal.operator.base import REQUIRED


class AveragePool(PoolPrototype):
    op_type = "AveragePool"
    versions = (1, 7, 10, 11, 19, 22)
    attributes = {**POOL_ATTRIBUTES, "kernel_shape": REQUIRED, "count_include_pad": 0, "ceil_mode": 0,
                  "dilations": None}
