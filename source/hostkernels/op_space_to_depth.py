"""SpaceToDepth on the CPU: reshape, transpose, reshape."""
from __future__ import annotations

from nnhal.hostkernels._shape import put_as
from nnhal.hostkernels.base import Kernel, RunFn


class SpaceToDepthKernel(Kernel):
    op_type = "SpaceToDepth"

    def prepare(self, node, ins, outs) -> RunFn:
        b = node.attrs["blocksize"]
        crd = node.attrs.get("mode", "DCR") == "CRD"

        def run(inputs, outputs):
            x = inputs[0]
            n, c, h, w = x.shape
            t = x.reshape(n, c, h // b, b, w // b, b)
            t = t.transpose(0, 1, 3, 5, 2, 4) if crd else t.transpose(0, 3, 5, 1, 2, 4)
            return (put_as(t, outputs[0], (n, c * b * b, h // b, w // b)),)

        return run


IMPLEMENTATIONS = (SpaceToDepthKernel,)
