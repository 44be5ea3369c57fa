"""Sum on the CPU: a numpy add fold over the inputs."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._binary import VariadicKernel
from nnhal.hostkernels._scratch import fused


class SumKernel(VariadicKernel):
    op_type = "Sum"
    ufunc = np.add
    fuse_activation = True   # a Relu/Clip fused by the CPU plan runs in place on the result

    def prepare(self, node, ins, outs):
        return fused(super().prepare(node, ins, outs), node)


IMPLEMENTATIONS = (SumKernel,)
