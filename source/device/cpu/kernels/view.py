"""Reshape, Flatten, Squeeze and Unsqueeze on the cpu device when both shapes are static: the output is input 0
with the output shape inference found, taken once at prepare (the references, hostkernels/_shape.py ViewKernel,
also read the shape input of a node whose shape is not known before the run).

The run function carries ``view_shape``: a promise that ``run(inputs, outputs)`` is exactly
``(inputs[0].reshape(view_shape),)``. The generated straight-line code (straight.py) then binds the output as that
reshape on the step's line, without a kernel call, an argument list or a store into a planned buffer (the planner
gives a view of an arena tensor no buffer; a view of a graph input or of a kernel's own array has one, which stays
unwritten: the view is of memory no step of the plan writes).
"""
from __future__ import annotations

from nnhal.hostkernels.base import Kernel, RunFn


def view_run(shape: tuple[int, ...]) -> RunFn:
    """The run function of a static view: input 0 reshaped to ``shape``, marked with ``view_shape``."""
    def run(inputs, outputs):
        return (inputs[0].reshape(shape),)

    run.view_shape = shape
    return run


class StaticView(Kernel):
    """A view kernel whose input and output shapes inference knows (dtype included)."""

    name = "view"
    view = {0: 0}

    def score(self, node, ins, outs) -> int:
        x = ins[0] if ins else None
        if x is None or not x.static or x.dtype is None or not outs or not outs[0].static:
            return 0
        return 2        # above the reference (1)

    def prepare(self, node, ins, outs) -> RunFn:
        return view_run(tuple(int(d) for d in outs[0].shape))


class ReshapeStatic(StaticView):
    op_type = "Reshape"


class FlattenStatic(StaticView):
    op_type = "Flatten"


class SqueezeStatic(StaticView):
    op_type = "Squeeze"


class UnsqueezeStatic(StaticView):
    op_type = "Unsqueeze"


IMPLEMENTATIONS = (ReshapeStatic, FlattenStatic, SqueezeStatic, UnsqueezeStatic)
