"""Det on the CPU: LU-based numpy determinant (float16 through float32)."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn, store


class DetKernel(Kernel):
    op_type = "Det"

    def prepare(self, node, ins, outs) -> RunFn:
        dtype = outs[0].dtype

        def run(inputs, outputs):
            x = inputs[0]
            if x.dtype == np.float16:
                x = x.astype(np.float32)
            return (store(np.linalg.det(x), outputs[0], dtype),)

        return run


IMPLEMENTATIONS = (DetKernel,)
