"""Or on the CPU: numpy logical_or, in place when input 0 dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._binary import BinaryKernel


class OrKernel(BinaryKernel):
    op_type = "Or"
    ufunc = np.logical_or


IMPLEMENTATIONS = (OrKernel,)
