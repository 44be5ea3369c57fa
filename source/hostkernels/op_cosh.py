"""Cosh on the CPU: numpy's cosh, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class CoshKernel(UfuncKernel):
    op_type = "Cosh"
    ufunc = np.cosh


IMPLEMENTATIONS = (CoshKernel,)
