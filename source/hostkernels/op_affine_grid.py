"""AffineGrid on the CPU: homogeneous base coordinates times theta."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn, store


def base_coords(size: int, align: bool) -> np.ndarray:
    """Normalized [-1, 1] pixel coordinates along one axis."""
    if align:
        return np.linspace(-1.0, 1.0, size) if size > 1 else np.array([-1.0] if size else [])
    return (np.arange(size) * 2 + 1) / size - 1


class AffineGridKernel(Kernel):
    op_type = "AffineGrid"

    def prepare(self, node, ins, outs) -> RunFn:
        align = bool(node.attrs["align_corners"])
        dtype = outs[0].dtype

        def run(inputs, outputs):
            theta, size = inputs
            dims = [int(v) for v in size.reshape(-1)]
            spatial = dims[2:]
            axes = [base_coords(s, align) for s in spatial]
            mesh = np.meshgrid(*axes, indexing="ij")
            # NOTE: homogeneous coordinates list the innermost axis first: (x, y, [z,] 1).
            homo = np.stack(list(mesh)[::-1] + [np.ones(spatial)], axis=-1)
            grid = np.einsum("...k,njk->n...j", homo, theta.astype(np.float64))
            return (store(grid, outputs[0], dtype),)

        return run


IMPLEMENTATIONS = (AffineGridKernel,)
