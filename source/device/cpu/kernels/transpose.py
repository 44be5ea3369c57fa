"""Transpose on the cpu device when it only moves axes of size 1: a reshape, a view without a copy (the
references: hostkernels/op_transpose.py). Exporters emit these around recurrent ops at batch 1
((T, 1, C) <-> (1, T, C) for one step: a streaming body's frame and output)."""
from __future__ import annotations

from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator.op_transpose import permutation


class TransposeReshape(Kernel):
    """A static permutation that keeps the order of the axes longer than 1: the output is the input reshaped,
    declared a view so the planner keeps the input alive while it is read."""

    op_type = "Transpose"
    name = "reshape"
    view = {0: 0}

    def score(self, node, ins, outs) -> int:
        x = ins[0] if ins else None
        if x is None or not x.static or not outs[0].static:
            return 0
        try:
            perm = list(permutation(node, len(x.shape)))
        except ValueError:
            return 0            # the reference kernel reports the bad perm
        moved = [p for p in perm if x.shape[p] != 1]
        return 3 if moved == sorted(moved) else 0

    def prepare(self, node, ins, outs) -> RunFn:
        shape = tuple(ins[0].shape[p] for p in permutation(node, len(ins[0].shape)))

        def run(inputs, outputs):
            return (inputs[0].reshape(shape),)

        return run


IMPLEMENTATIONS = (TransposeReshape,)
