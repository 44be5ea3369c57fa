"""Exp on the CPU: numpy's exp, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class ExpKernel(UfuncKernel):
    op_type = "Exp"
    ufunc = np.exp


IMPLEMENTATIONS = (ExpKernel,)
