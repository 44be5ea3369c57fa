"""Tan on the CPU: numpy's tan, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class TanKernel(UfuncKernel):
    op_type = "Tan"
    ufunc = np.tan


IMPLEMENTATIONS = (TanKernel,)
