"""Tanh on the CPU: numpy's tanh, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class TanhKernel(UfuncKernel):
    op_type = "Tanh"
    ufunc = np.tanh


IMPLEMENTATIONS = (TanhKernel,)
