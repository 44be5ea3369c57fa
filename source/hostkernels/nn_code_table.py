"""CodeTable (ai.nnhal) on the CPU: one gather of X's bytes from the table (per channel of X's last axis for a
[C, 256] table)."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import FunctionKernel


class CodeTableKernel(FunctionKernel):
    op_type = "CodeTable"

    def compute(self, node, x, table):
        codes = x.view(np.uint8) if x.dtype != np.uint8 else x
        if table.ndim == 2:
            return table[np.arange(table.shape[0]), codes]
        return np.take(table, codes)


IMPLEMENTATIONS = (CodeTableKernel,)
