"""Cos on the CPU: numpy's cos, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class CosKernel(UfuncKernel):
    op_type = "Cos"
    ufunc = np.cos


IMPLEMENTATIONS = (CosKernel,)
