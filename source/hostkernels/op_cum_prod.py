"""CumProd on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._reduce import CumulativeKernel


class CumProdKernel(CumulativeKernel):
    op_type = "CumProd"
    ufunc = np.multiply
    identity = 1


IMPLEMENTATIONS = (CumProdKernel,)
