"""Split on the cpu device (the references: hostkernels/op_split.py):

* ``view``: equal parts of a static tensor whose axes before the split axis are all 1, so that each part is one
  contiguous block of the input. A GRU cell splits its gate projections (1, 3H) this way once per step inside a
  recurrent body.
* ``native``: any other static Split, each part copied out of its rows of the input by the native row copy
  (native/nn_concat.h ``copy_rows``): the channel Split of a channels-last region (YOLO's C2f blocks, which the
  layout pass keeps NHWC), one row per pixel, where numpy's strided copy loops per pixel. Its input may be a
  channel slice of a wider channels-last tensor (``strided_input``: a C2f Concat's output, which the Split's
  input is written into, split_concat.py): the row copy reads it through its pixel stride.
"""
from __future__ import annotations

from itertools import pairwise
from operator import itemgetter

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.hostkernels._shape import ints
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator.op_split import split_sizes

MAX_OUTPUTS = 64


class SplitView(Kernel):
    """Each output a view of its block of the input (declared views: the planner keeps the input alive while
    any part is read). Equal parts only, so that an element-wise step writing in place of a part whose input
    dies there (the planner puts it at the start of the input's buffer) is either on that part or beside it,
    never half over it."""

    op_type = "Split"
    name = "view"
    view = {k: 0 for k in range(MAX_OUTPUTS)}

    def score(self, node, ins, outs) -> int:
        x = ins[0]
        if x is None or not x.static or not x.shape or not 0 < len(outs) <= MAX_OUTPUTS \
                or any(o is None or not o.static or o.shape is None for o in outs):
            return 0
        axis = node.attrs.get("axis", 0) % len(x.shape)
        parts = {tuple(o.shape) for o in outs}
        if len(parts) != 1 or any(d != 1 for d in x.shape[:axis]) \
                or next(iter(parts))[axis] * len(outs) != x.shape[axis]:
            return 0
        return 3

    def prepare(self, node, ins, outs) -> RunFn:
        axis = node.attrs.get("axis", 0) % len(ins[0].shape)
        width = outs[0].shape[axis]
        head = (slice(None),) * axis
        slices = tuple(head + (slice(k * width, (k + 1) * width),) for k in range(len(outs)))
        if len(slices) == 1:
            only = slices[0]

            def run(inputs, outputs):
                return (inputs[0][only],)

            return run
        # NOTE: one C call makes every part (a GRU cell's step splits two projections per iteration: 0.6 us
        # against 3.0 for a generator of the slices, on a loaded machine)
        parts = itemgetter(*slices)

        def run(inputs, outputs):
            return parts(inputs[0])

        return run


def _static_sizes(node, ins, outs) -> list[int] | None:
    """The parts' extents along the axis of a static Split with constant sizes, else None."""
    x = ins[0] if ins else None
    if x is None or not x.static or not x.shape or x.dtype is None or x.dtype.hasobject \
            or any(o is None or not o.static or o.dtype != x.dtype for o in outs):
        return None
    if len(ins) > 1 and ins[1] is not None and ins[1].value is None:
        return None
    split = ints(ins[1].value) if len(ins) > 1 and ins[1] is not None else None
    if split is None and node.version < 13 and node.attrs.get("split"):
        split = list(node.attrs["split"])
    return list(split_sizes(node, x.shape[node.attrs.get("axis", 0) % len(x.shape)], split, len(node.outputs)))


class SplitRows(Kernel):
    """A static Split by rows (see the module docstring); where the parts are blocks of the input ``view``
    takes it, and small Splits keep the host kernel's copies."""

    op_type = "Split"
    name = "native"
    MIN_BYTES = 4096
    strided_input = frozenset({0})

    def score(self, node, ins, outs) -> int:
        if not native.available() or _static_sizes(node, ins, outs) is None:
            return 0
        x = ins[0]
        axis = node.attrs.get("axis", 0) % len(x.shape)
        if all(d == 1 for d in x.shape[:axis]):
            return 0                                   # each part a contiguous block: a view or one memcpy
        return 3 if int(np.prod(x.shape, dtype=np.int64)) * x.dtype.itemsize >= self.MIN_BYTES else 0

    def prepare(self, node, ins, outs) -> RunFn:
        shape, dtype = tuple(ins[0].shape), ins[0].dtype
        axis = node.attrs.get("axis", 0) % len(shape)
        sizes = _static_sizes(node, ins, outs)
        rows = int(np.prod(shape[:axis], dtype=np.int64))
        unit = int(np.prod(shape[axis + 1:], dtype=np.int64)) * dtype.itemsize
        stride = shape[axis] * unit
        bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        head = (slice(None),) * axis
        parts_of = [(k, tuple(o.shape), (b - a) * unit, a * unit, head + (slice(a, b),))
                    for k, ((a, b), o) in enumerate(zip(pairwise(bounds), outs)) if node.outputs[k]]

        # NOTE: the strided input is the same arena view run after run: its byte view (as_strided, ~35 us) is
        # kept with it; one (array, view, pitch) tuple swapped whole, so threads sharing the plan never mix two
        last = [(None, None, 0)]

        def run(inputs, outputs):
            x = inputs[0]
            if x.flags.c_contiguous:
                xb, pitch = x.reshape(-1).view(np.uint8), stride
            else:
                seen, xb, pitch = last[0]
                if seen is not x:
                    xb, pitch = pitched_rows(x, axis)
                    last[0] = (x, xb, pitch)
            if xb is None:
                x = np.ascontiguousarray(x)
                xb, pitch = x.reshape(-1).view(np.uint8), stride
            result = [None] * len(outputs)
            # NOTE: parts at run time, the run's threads (concat.py says why)
            parts = parallel.native_parts(rows * stride // 4, rows) if parallel.native_pool() else 1
            for k, oshape, width, offset, part in parts_of:
                y = outputs[k]
                if y is None:
                    y = np.empty(oshape, dtype)
                if not y.flags.c_contiguous:           # not planned so; numpy's copy keeps it correct anyway
                    np.copyto(y, x[part])
                elif width:
                    native.copy_rows(xb, y.reshape(-1).view(np.uint8), rows, width, pitch, offset, width, 0, parts)
                result[k] = y
            return tuple(result)

        return run


def pitched_rows(x: np.ndarray, axis: int) -> tuple[np.ndarray | None, int]:
    """A slice of the last axis of a wider C-contiguous tensor (``axis`` the last) as the bytes from its first
    element to its last, one C-contiguous uint8 array, and the byte distance of its rows (the wider tensor's
    row); (None, 0) for any other layout."""
    item = x.itemsize
    if x.ndim < 2 or axis != x.ndim - 1 or x.strides[-1] != item or x.size == 0:
        return None, 0
    pitch = expect = 0
    for n, step in zip(reversed(x.shape[:-1]), reversed(x.strides[:-1])):
        if n == 1:
            continue
        if not pitch:
            pitch = expect = step
        if step != expect:
            return None, 0
        expect = step * n
    if pitch < x.shape[-1] * item or pitch % item:
        return None, 0
    rows = x.size // x.shape[-1]
    extent = (rows - 1) * (pitch // item) + x.shape[-1]
    # NOTE: the view spans the other channels of the wider tensor between the rows: the row copy reads none of them
    flat = np.lib.stride_tricks.as_strided(x, shape=(extent,), strides=(item,), writeable=False)
    return flat.view(np.uint8), pitch


IMPLEMENTATIONS = (SplitView, SplitRows)
