"""Sum on the CPU: a numpy add fold over the inputs."""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.kernels._binary import VariadicKernel


class SumKernel(VariadicKernel):
    op_type = "Sum"
    ufunc = np.add


IMPLEMENTATIONS = (SumKernel,)
