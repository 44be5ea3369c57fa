"""Col2Im on the CPU: scatter-add of block columns."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._nn import scatter_windows
from nnhal.hostkernels.base import Kernel, RunFn, store


class Col2ImKernel(Kernel):
    op_type = "Col2Im"

    def prepare(self, node, ins, outs) -> RunFn:
        dtype = outs[0].dtype

        def run(inputs, outputs):
            x, image, block = inputs
            image = [int(v) for v in image.reshape(-1)]
            block = [int(v) for v in block.reshape(-1)]
            n = len(block)
            dil = list(node.attrs["dilations"] or [1] * n)
            pads = list(node.attrs["pads"] or [0] * (2 * n))
            strides = list(node.attrs["strides"] or [1] * n)
            counts = [(image[i] + pads[i] + pads[i + n] - (block[i] - 1) * dil[i] - 1) // strides[i] + 1
                      for i in range(n)]
            if int(np.prod(counts)) != x.shape[2]:
                raise ValueError(f"{x.shape[2]} columns do not match {counts} block positions")
            cols = x.reshape((x.shape[0], -1) + tuple(block) + tuple(counts))
            y = scatter_windows(cols, block, strides, dil, pads, image)
            return (store(y, outputs[0], dtype),)

        return run


IMPLEMENTATIONS = (Col2ImKernel,)
