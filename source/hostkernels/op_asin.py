"""Asin on the CPU: numpy's arcsin, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class AsinKernel(UfuncKernel):
    op_type = "Asin"
    ufunc = np.arcsin


IMPLEMENTATIONS = (AsinKernel,)
