"""Abs on the CPU: numpy's absolute, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class AbsKernel(UfuncKernel):
    op_type = "Abs"
    ufunc = np.absolute


IMPLEMENTATIONS = (AbsKernel,)
