"""Asinh on the CPU: numpy's arcsinh, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class AsinhKernel(UfuncKernel):
    op_type = "Asinh"
    ufunc = np.arcsinh


IMPLEMENTATIONS = (AsinhKernel,)
