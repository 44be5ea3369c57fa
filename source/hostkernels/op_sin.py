"""Sin on the CPU: numpy's sin, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class SinKernel(UfuncKernel):
    op_type = "Sin"
    ufunc = np.sin


IMPLEMENTATIONS = (SinKernel,)
