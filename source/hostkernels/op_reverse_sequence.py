"""ReverseSequence on the CPU: one gather with per-batch reversed time indices."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels.base import FunctionKernel


class ReverseSequenceKernel(FunctionKernel):
    op_type = "ReverseSequence"

    def compute(self, node: Node, x: np.ndarray, lens: np.ndarray) -> np.ndarray:
        time_axis = node.attrs["time_axis"]
        steps, batch = x.shape[time_axis], x.shape[1 - time_axis]
        length = np.clip(np.asarray(lens, dtype=np.int64).reshape(1, -1), 0, steps)
        t = np.arange(steps, dtype=np.int64)[:, None]
        source = np.where(t < length, length - 1 - t, t)          # (time, batch)
        b = np.arange(batch, dtype=np.int64)[None, :]
        if time_axis == 0:
            return x[source, b]
        return x[b.T, source.T]


IMPLEMENTATIONS = (ReverseSequenceKernel,)
