"""Less on the CPU: numpy less."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._binary import CompareKernel


class LessKernel(CompareKernel):
    op_type = "Less"
    ufunc = np.less


IMPLEMENTATIONS = (LessKernel,)
