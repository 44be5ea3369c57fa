"""LessOrEqual on the CPU: numpy less_equal."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._binary import CompareKernel


class LessOrEqualKernel(CompareKernel):
    op_type = "LessOrEqual"
    ufunc = np.less_equal


IMPLEMENTATIONS = (LessOrEqualKernel,)
