"""BitwiseXor on the CPU: numpy bitwise_xor, in place when input 0 dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._binary import BinaryKernel


class BitwiseXorKernel(BinaryKernel):
    op_type = "BitwiseXor"
    ufunc = np.bitwise_xor


IMPLEMENTATIONS = (BitwiseXorKernel,)
