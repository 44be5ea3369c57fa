"""Equal on the CPU: numpy equal (also on strings)."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._binary import CompareKernel


class EqualKernel(CompareKernel):
    op_type = "Equal"
    ufunc = np.equal


IMPLEMENTATIONS = (EqualKernel,)
