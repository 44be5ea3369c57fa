"""Neg on the CPU: numpy's negative, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class NegKernel(UfuncKernel):
    op_type = "Neg"
    ufunc = np.negative


IMPLEMENTATIONS = (NegKernel,)
