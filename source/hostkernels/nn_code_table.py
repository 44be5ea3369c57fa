"""CodeTable (ai.nnhal) on the CPU: one gather of X's bytes from the table."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import FunctionKernel


class CodeTableKernel(FunctionKernel):
    op_type = "CodeTable"

    def compute(self, node, x, table):
        return np.take(table, x.view(np.uint8) if x.dtype != np.uint8 else x)


IMPLEMENTATIONS = (CodeTableKernel,)
