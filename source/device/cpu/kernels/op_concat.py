"""Concat on the CPU: straight into the output buffer."""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.kernels.base import Kernel, RunFn


class ConcatKernel(Kernel):
    op_type = "Concat"

    def prepare(self, node, ins, outs) -> RunFn:
        axis = node.attrs["axis"]

        def run(inputs, outputs):
            parts = [x for x in inputs if x is not None]
            return (np.concatenate(parts, axis=axis, out=outputs[0]),)

        return run


IMPLEMENTATIONS = (ConcatKernel,)
