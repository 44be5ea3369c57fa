"""Mul on the CPU: one numpy ufunc into the output buffer, in place when input 0 dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._binary import BinaryKernel


class MulKernel(BinaryKernel):
    op_type = "Mul"
    ufunc = np.multiply


IMPLEMENTATIONS = (MulKernel,)
