"""Sinh on the CPU: numpy's sinh, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class SinhKernel(UfuncKernel):
    op_type = "Sinh"
    ufunc = np.sinh


IMPLEMENTATIONS = (SinhKernel,)
