"""BitwiseAnd on the CPU: numpy bitwise_and, in place when input 0 dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._binary import BinaryKernel


class BitwiseAndKernel(BinaryKernel):
    op_type = "BitwiseAnd"
    ufunc = np.bitwise_and


IMPLEMENTATIONS = (BitwiseAndKernel,)
