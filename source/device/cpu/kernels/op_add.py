"""Add on the CPU: one numpy ufunc into the output buffer, in place when input 0 dies here."""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.kernels._binary import BinaryKernel


class AddKernel(BinaryKernel):
    op_type = "Add"
    ufunc = np.add


IMPLEMENTATIONS = (AddKernel,)
