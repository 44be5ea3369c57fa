"""Reciprocal on the CPU: numpy's reciprocal, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class ReciprocalKernel(UfuncKernel):
    op_type = "Reciprocal"
    ufunc = np.reciprocal


IMPLEMENTATIONS = (ReciprocalKernel,)
