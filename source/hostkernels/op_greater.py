"""Greater on the CPU: numpy greater."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._binary import CompareKernel


class GreaterKernel(CompareKernel):
    op_type = "Greater"
    ufunc = np.greater


IMPLEMENTATIONS = (GreaterKernel,)
