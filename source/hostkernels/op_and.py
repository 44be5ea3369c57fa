"""And on the CPU: numpy logical_and, in place when input 0 dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._binary import BinaryKernel


class AndKernel(BinaryKernel):
    op_type = "And"
    ufunc = np.logical_and


IMPLEMENTATIONS = (AndKernel,)
