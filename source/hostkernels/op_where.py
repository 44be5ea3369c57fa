"""Where on the CPU: Y copied into the output, then X over it where the condition holds."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator.base import Info


class WhereKernel(Kernel):
    op_type = "Where"
    # NOTE: Y is copied first, so the output may overwrite Y but never X.
    inplace = {0: 2}

    def prepare(self, node: Node, ins: list[Info | None], outs: list[Info]) -> RunFn:
        def run(inputs: list, outputs: list) -> tuple:
            cond, x, y = inputs
            out = outputs[0]
            if out is None:
                return (np.asarray(np.where(cond, x, y)),)
            np.copyto(out, y)
            np.copyto(out, x, where=cond)
            return (out,)

        return run


IMPLEMENTATIONS = (WhereKernel,)
