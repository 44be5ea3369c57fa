"""Ceil on the CPU: numpy's ceil, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class CeilKernel(UfuncKernel):
    op_type = "Ceil"
    ufunc = np.ceil


IMPLEMENTATIONS = (CeilKernel,)
