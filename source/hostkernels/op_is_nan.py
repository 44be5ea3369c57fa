"""IsNaN on the CPU: numpy's isnan."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class IsNaNKernel(UfuncKernel):
    op_type = "IsNaN"
    ufunc = np.isnan
    inplace: dict[int, int] = {}


IMPLEMENTATIONS = (IsNaNKernel,)
