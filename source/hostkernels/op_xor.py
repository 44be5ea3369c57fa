"""Xor on the CPU: numpy logical_xor, in place when input 0 dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._binary import BinaryKernel


class XorKernel(BinaryKernel):
    op_type = "Xor"
    ufunc = np.logical_xor


IMPLEMENTATIONS = (XorKernel,)
