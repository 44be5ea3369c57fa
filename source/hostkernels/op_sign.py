"""Sign on the CPU: numpy's sign, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class SignKernel(UfuncKernel):
    op_type = "Sign"
    ufunc = np.sign


IMPLEMENTATIONS = (SignKernel,)
