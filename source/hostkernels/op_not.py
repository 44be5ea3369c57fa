"""Not on the CPU: numpy's logical_not, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class NotKernel(UfuncKernel):
    op_type = "Not"
    ufunc = np.logical_not


IMPLEMENTATIONS = (NotKernel,)
