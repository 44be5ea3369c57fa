"""Einsum on the CPU: numpy einsum with a contraction path planned once per shape."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn, store


class EinsumKernel(Kernel):
    op_type = "Einsum"

    def prepare(self, node, ins, outs) -> RunFn:
        equation = node.attrs["equation"].replace(" ", "")
        dtype = outs[0].dtype
        paths: dict[tuple, list] = {}

        def run(inputs, outputs):
            key = tuple(x.shape for x in inputs)
            if key not in paths:
                paths[key] = np.einsum_path(equation, *inputs, optimize="greedy")[0] if len(inputs) > 2 else False
            y = np.einsum(equation, *inputs, optimize=paths[key])
            return (store(y, outputs[0], dtype or y.dtype),)

        return run


IMPLEMENTATIONS = (EinsumKernel,)
