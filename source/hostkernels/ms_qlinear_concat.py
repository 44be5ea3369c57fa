"""QLinearConcat (com.microsoft) on the CPU: inputs requantized to the output's parameters."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._msq import real, to_quantized
from nnhal.hostkernels.base import FunctionKernel


class QLinearConcatKernel(FunctionKernel):
    op_type = "QLinearConcat"

    def compute(self, node, y_scale, y_zero, *triples):
        parts = []
        for x, scale, zero in zip(triples[0::3], triples[1::3], triples[2::3]):
            same = np.array_equal(scale, y_scale) and np.array_equal(zero, y_zero)
            parts.append(x if same else to_quantized(real(x, scale, zero), y_scale, y_zero, x.dtype))
        return np.concatenate(parts, axis=node.attrs["axis"])


IMPLEMENTATIONS = (QLinearConcatKernel,)
