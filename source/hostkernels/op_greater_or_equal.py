"""GreaterOrEqual on the CPU: numpy greater_equal."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._binary import CompareKernel


class GreaterOrEqualKernel(CompareKernel):
    op_type = "GreaterOrEqual"
    ufunc = np.greater_equal


IMPLEMENTATIONS = (GreaterOrEqualKernel,)
