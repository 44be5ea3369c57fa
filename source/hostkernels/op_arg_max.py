"""ArgMax on the CPU."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._reduce import ArgKernel


class ArgMaxKernel(ArgKernel):
    op_type = "ArgMax"
    finder = np.argmax


IMPLEMENTATIONS = (ArgMaxKernel,)
