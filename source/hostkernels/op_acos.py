"""Acos on the CPU: numpy's arccos, in place when the input dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._unary import UfuncKernel


class AcosKernel(UfuncKernel):
    op_type = "Acos"
    ufunc = np.arccos


IMPLEMENTATIONS = (AcosKernel,)
