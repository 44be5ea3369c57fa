"""Sqrt on the CPU: numpy's sqrt, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class SqrtKernel(UfuncKernel):
    op_type = "Sqrt"
    ufunc = np.sqrt


IMPLEMENTATIONS = (SqrtKernel,)
