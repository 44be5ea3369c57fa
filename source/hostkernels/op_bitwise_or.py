"""BitwiseOr on the CPU: numpy bitwise_or, in place when input 0 dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._binary import BinaryKernel


class BitwiseOrKernel(BinaryKernel):
    op_type = "BitwiseOr"
    ufunc = np.bitwise_or


IMPLEMENTATIONS = (BitwiseOrKernel,)
