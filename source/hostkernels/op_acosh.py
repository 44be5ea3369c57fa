"""Acosh on the CPU: numpy's arccosh, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class AcoshKernel(UfuncKernel):
    op_type = "Acosh"
    ufunc = np.arccosh


IMPLEMENTATIONS = (AcoshKernel,)
