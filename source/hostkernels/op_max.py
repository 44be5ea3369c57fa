"""Max on the CPU: a numpy maximum fold over the inputs (NaN propagates)."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._binary import VariadicKernel


class MaxKernel(VariadicKernel):
    op_type = "Max"
    ufunc = np.maximum


IMPLEMENTATIONS = (MaxKernel,)
