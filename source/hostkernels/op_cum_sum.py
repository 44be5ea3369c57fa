"""CumSum on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._reduce import CumulativeKernel


class CumSumKernel(CumulativeKernel):
    op_type = "CumSum"
    ufunc = np.add
    identity = 0


IMPLEMENTATIONS = (CumSumKernel,)
