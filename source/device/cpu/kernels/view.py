"""Views on the cpu device, taken once at prepare:

* Reshape, Flatten, Squeeze and Unsqueeze when both shapes are static: input 0 with the output shape inference
  found (the references, hostkernels/_shape.py ViewKernel, also read the shape input of a node whose shape is not
  known before the run);
* Gather by constant indices that pick one contiguous block: a scalar index or consecutive ascending indices on an
  axis with only axes of size 1 before it (a fused QKV projection's q, k, v split, a sequence's first token).

The run function carries ``view_of = (shape, start, stop)``: a promise that ``run(inputs, outputs)`` is exactly
``(inputs[0].reshape(shape),)`` when ``start`` is None, else ``(inputs[0].reshape(-1)[start:stop].reshape(shape),)``
(element offsets of a C-contiguous input). The generated straight-line code (straight.py) then binds the output as that
reshape on the step's line, without a kernel call, an argument list or a store into a planned buffer (the planner
gives a view no buffer of its own: a view of an arena tensor shares that tensor's, and a view of a graph input, a
constant or a kernel's own array is of memory no step of the plan writes).
"""
from __future__ import annotations

import math

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.op_identity import IdentityKernel


def view_run(shape: tuple[int, ...], start: int | None = None, stop: int | None = None) -> RunFn:
    """The run function of a static view: input 0 reshaped to ``shape`` (its flat elements [start, stop) when
    ``start`` is given), marked with ``view_of``."""
    if start is None:
        def run(inputs, outputs):
            return (inputs[0].reshape(shape),)
    else:
        def run(inputs, outputs):
            return (inputs[0].reshape(-1)[start:stop].reshape(shape),)

    run.view_of = (shape, start, stop)
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


def _block(node, ins, outs) -> tuple[int, int] | None:
    """(start, stop) in flat elements of the block a Gather by constant indices picks, when it is one."""
    data, indices = (list(ins) + [None, None])[:2]
    if data is None or not data.static or data.dtype is None or not data.shape or indices is None \
            or indices.value is None or not outs or not outs[0].static:
        return None
    rank = len(data.shape)
    axis = node.attrs.get("axis", 0)
    if not -rank <= axis < rank:
        return None
    axis %= rank
    idx = np.asarray(indices.value).reshape(-1).astype(np.int64)
    dim = int(data.shape[axis])
    if idx.size == 0 or np.asarray(indices.value).ndim > 1 or idx.min() < -dim or idx.max() >= dim \
            or math.prod(data.shape[:axis]) != 1:
        return None
    idx = np.where(idx < 0, idx + dim, idx)
    if np.any(np.diff(idx) != 1):
        return None
    inner = math.prod(int(d) for d in data.shape[axis + 1:])
    return int(idx[0]) * inner, (int(idx[-1]) + 1) * inner


class GatherBlock(Kernel):
    """A Gather by constant indices that picks one contiguous block of its input: a view of it."""

    op_type = "Gather"
    name = "view"
    view = {0: 0}

    def score(self, node, ins, outs) -> int:
        return 11 if _block(node, ins, outs) is not None else 0     # above the native pick (10)

    def prepare(self, node, ins, outs) -> RunFn:
        start, stop = _block(node, ins, outs)
        return view_run(tuple(int(d) for d in outs[0].shape), start, stop)


class IdentityAlias(IdentityKernel):
    """Identity on the cpu device: the output is the input, an alias; the generated code binds it without a call
    (straight.py binds_input), a native step program as an alias, a borrowed body's output as that tensor
    (control.binds_output). The host kernel's run, under a name of its own: no reference kernel in a profile."""

    name = "alias"

    def score(self, node, ins, outs) -> int:
        return 2 if len(node.inputs) == 1 else 0


IMPLEMENTATIONS = (ReshapeStatic, FlattenStatic, SqueezeStatic, UnsqueezeStatic, GatherBlock, IdentityAlias)
