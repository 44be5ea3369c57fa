"""BitwiseNot on the CPU: numpy's invert, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class BitwiseNotKernel(UfuncKernel):
    op_type = "BitwiseNot"
    ufunc = np.invert


IMPLEMENTATIONS = (BitwiseNotKernel,)
