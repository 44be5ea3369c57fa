"""Split on the CPU: each part copied into its own output."""
from __future__ import annotations

from itertools import pairwise

import numpy as np

from nnhal.hostkernels._shape import ints, put
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator.op_split import split_sizes


class SplitKernel(Kernel):
    op_type = "Split"

    def prepare(self, node, ins, outs) -> RunFn:
        count = len(node.outputs)

        def run(inputs, outputs):
            x = inputs[0]
            axis = node.attrs["axis"] % x.ndim
            split = ints(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else None
            if split is None and node.version < 13 and node.attrs.get("split"):
                split = list(node.attrs["split"])
            sizes = split_sizes(node, x.shape[axis], split, count)
            parts = np.split(x, np.cumsum(sizes)[:-1], axis=axis)
            return tuple(put(p, o) for p, o in zip(parts, outputs))

        return run


class StaticSplitKernel(Kernel):
    """Split of a static shape by constant sizes: the parts' slices planned once, each copied straight into
    its preallocated output (no per-run size arithmetic: Split runs once per step inside recurrent bodies)."""

    op_type = "Split"
    name = "static"

    def score(self, node, ins, outs) -> int:
        x = ins[0]
        if x is None or x.shape is None or not x.static:
            return 0
        if len(ins) > 1 and ins[1] is not None and ins[1].value is None:
            return 0
        return 2

    def prepare(self, node, ins, outs) -> RunFn:
        shape = ins[0].shape
        axis = node.attrs["axis"] % len(shape)
        split = ints(ins[1].value) if len(ins) > 1 and ins[1] is not None else None
        if split is None and node.version < 13 and node.attrs.get("split"):
            split = list(node.attrs["split"])
        sizes = split_sizes(node, shape[axis], split, len(node.outputs))
        bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        head = (slice(None),) * axis
        slices = [head + (slice(a, b),) for a, b in pairwise(bounds)]

        def run(inputs, outputs):
            x = inputs[0]
            return tuple(put(x[sl], o) for sl, o in zip(slices, outputs))

        return run


IMPLEMENTATIONS = (SplitKernel, StaticSplitKernel)
