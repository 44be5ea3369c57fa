"""Atan on the CPU: numpy's arctan, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class AtanKernel(UfuncKernel):
    op_type = "Atan"
    ufunc = np.arctan


IMPLEMENTATIONS = (AtanKernel,)
