"""GridSample on the CPU: vectorized interpolation over all grid points at once."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._nn import reflect, sample_points
from nnhal.hostkernels.base import Kernel, RunFn, store

MODE = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic", "nearest": "nearest"}


class GridSampleKernel(Kernel):
    op_type = "GridSample"

    def prepare(self, node, ins, outs) -> RunFn:
        mode = MODE[node.attrs["mode"]]
        padding = node.attrs["padding_mode"]
        align = bool(node.attrs["align_corners"])
        dtype = outs[0].dtype

        def run(inputs, outputs):
            x, grid = inputs
            n, c = x.shape[:2]
            sizes = list(x.shape[2:])
            r = len(sizes)
            g = grid.reshape(n, -1, r).astype(np.float64)
            coords, borders = [], []
            for axis, size in enumerate(sizes):
                # NOTE: the grid lists coordinates innermost axis first (x, y, z).
                v = g[:, :, r - 1 - axis]
                v = (v + 1) / 2 * (size - 1) if align else ((v + 1) * size - 1) / 2
                if mode == "nearest":
                    v = np.rint(v)
                lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
                outside = (v < lo) | (v > hi)
                if padding == "border":
                    v = np.where(outside, np.clip(v, 0, size - 1), v)
                elif padding == "reflection":
                    v = np.where(outside, reflect(v, lo, hi), v)
                coords.append(v)
                borders.append((lo, hi))
            work = np.result_type(x.dtype, np.float32)
            y = sample_points(x.reshape(n, c, -1), sizes, coords, mode, padding, borders, work)
            return (store(y.reshape((n, c) + grid.shape[1:-1]), outputs[0], dtype),)

        return run


IMPLEMENTATIONS = (GridSampleKernel,)
