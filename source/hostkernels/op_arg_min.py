"""ArgMin on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._reduce import ArgKernel


class ArgMinKernel(ArgKernel):
    op_type = "ArgMin"
    finder = np.argmin


IMPLEMENTATIONS = (ArgMinKernel,)
