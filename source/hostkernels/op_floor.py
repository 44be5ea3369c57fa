"""Floor on the CPU: numpy's floor, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class FloorKernel(UfuncKernel):
    op_type = "Floor"
    ufunc = np.floor


IMPLEMENTATIONS = (FloorKernel,)
