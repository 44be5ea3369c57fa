"""DepthToSpace on the CPU: reshape, transpose, reshape."""
from __future__ import annotations

from nnhal.hostkernels._shape import put_as
from nnhal.hostkernels.base import Kernel, RunFn


class DepthToSpaceKernel(Kernel):
    op_type = "DepthToSpace"

    def prepare(self, node, ins, outs) -> RunFn:
        b = node.attrs["blocksize"]
        crd = node.attrs.get("mode", "DCR") == "CRD"

        def run(inputs, outputs):
            x = inputs[0]
            n, c, h, w = x.shape
            if crd:
                t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
            else:
                t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
            return (put_as(t, outputs[0], (n, c // (b * b), h * b, w * b)),)

        return run


IMPLEMENTATIONS = (DepthToSpaceKernel,)
