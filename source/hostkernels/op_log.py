"""Log on the CPU: numpy's log, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class LogKernel(UfuncKernel):
    op_type = "Log"
    ufunc = np.log


IMPLEMENTATIONS = (LogKernel,)
