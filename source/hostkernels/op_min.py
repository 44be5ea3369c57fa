"""Min on the CPU: a numpy minimum fold over the inputs (NaN propagates)."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._binary import VariadicKernel


class MinKernel(VariadicKernel):
    op_type = "Min"
    ufunc = np.minimum


IMPLEMENTATIONS = (MinKernel,)
