"""Atanh on the CPU: numpy's arctanh, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class AtanhKernel(UfuncKernel):
    op_type = "Atanh"
    ufunc = np.arctanh


IMPLEMENTATIONS = (AtanhKernel,)
