"""Add on the CPU: one numpy ufunc into the output buffer, in place when input 0 dies here."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._binary import BinaryKernel
from nnhal.hostkernels._scratch import fused


class AddKernel(BinaryKernel):
    op_type = "Add"
    ufunc = np.add
    fuse_activation = True   # a Relu/Clip the CPU plan fuses into this node runs in place after the add

    def prepare(self, node, ins, outs):
        return fused(super().prepare(node, ins, outs), node)


IMPLEMENTATIONS = (AddKernel,)
