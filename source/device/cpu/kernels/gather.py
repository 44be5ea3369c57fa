"""Gather on the cpu device: a native row-wise pick along the last axis (the references: hostkernels/op_gather.py)."""
from __future__ import annotations

from functools import partial

import numpy as np

from nnhal.device.cpu import native
from nnhal.device.cpu.kernels._io import planned_io
from nnhal.hostkernels._shape import wrap_indices
from nnhal.hostkernels.base import Kernel, RunFn

# NOTE: at most this many run-time indices are taken by np.take's mode="raise", which buffers the output
# (a copy more, a few rows here) but checks and wraps the indices itself
FEW_INDICES = 64


class GatherLastAxis(Kernel):
    """The last axis of static 4-byte data by constant 1-D indices, all in range: the native kernel picks
    each row's elements while the row is in L1. np.take copies whole blocks on any other axis.
    ShuffleNet's channel shuffle (a Gather of the channel axis in NHWC, indices the transpose of a
    (g, C/g) matrix) runs as that transpose, without gather instructions (8x28x28x240, 3 groups: np.take
    1.18 ms, gathers 0.44, the transpose 0.17, a plain copy 0.15)."""

    op_type = "Gather"
    name = "native-last"
    # the output may be a channel slice of a wider channels-last tensor (plan.concat_slices): ShuffleNet v2's
    # untouched half picked straight into the next block's Concat, which then copies nothing
    strided_output = True

    def score(self, node, ins, outs) -> int:
        data, indices = ins[0], ins[1] if len(ins) > 1 else None
        if not native.available() or data is None or not data.static or not data.shape or data.dtype is None \
                or data.dtype.itemsize != 4 or data.dtype.kind not in "fiu" or indices is None or indices.value is None:
            return 0
        rank = len(data.shape)
        idx = np.asarray(indices.value)
        if node.attrs.get("axis", 0) % rank != rank - 1 or idx.ndim != 1 or idx.size == 0:
            return 0
        dim = data.shape[-1]
        return 10 if bool(np.all((idx >= -dim) & (idx < dim))) else 0

    def prepare(self, node, ins, outs) -> RunFn:
        data = ins[0]
        idx = np.ascontiguousarray(wrap_indices(ins[1].value, data.shape[-1]), dtype=np.int32)
        shape = tuple(data.shape[:-1]) + (idx.size,)
        rows = int(np.prod(data.shape[:-1], dtype=np.int64))
        groups = _shuffle_groups(idx, data.shape[-1])

        def run(inputs, outputs):
            x = np.ascontiguousarray(inputs[0])
            out = outputs[0]
            if out is None:
                out = np.empty(shape, x.dtype)
            if groups and out.flags.c_contiguous:
                native.shuffle_last(x, out, groups, 0, rows)
            else:
                native.gather_last(x, out, idx, 0, rows)
            return (out,)

        def bind(inputs, outputs):
            # NOTE: a planned step (straight.bind): the native call on the fixed buffers
            if not planned_io(inputs, outputs, tuple(data.shape), shape, data.dtype):
                return None
            if groups:
                return partial(native.shuffle_last, inputs[0], outputs[0], groups, 0, rows)
            return partial(native.gather_last, inputs[0], outputs[0], idx, 0, rows)

        run.bind = bind
        return run


def _shuffle_groups(idx: np.ndarray, dim: int) -> int:
    """g when ``idx`` is the channel shuffle of ``dim`` channels in g > 1 groups (idx[k * g + j] = j * dim / g + k),
    else 0."""
    if idx.size != dim or dim < 2 or idx[0] != 0 or idx[1] <= 0 or dim % int(idx[1]):
        return 0
    groups = dim // int(idx[1])
    shuffle = np.arange(dim).reshape(groups, dim // groups).T.reshape(-1)
    return groups if groups > 1 and np.array_equal(idx, shuffle) else 0



class GatherScalarRow(Kernel):
    """One entry of axis 0 by a scalar (0-d) index, constant or not: a view of that entry, the index wrapped and
    range-checked per run in Python (a streaming Loop's ``frames[i]``: no numpy call at all). The planner keeps
    the data alive while the view is read (``view``)."""

    op_type = "Gather"
    name = "row-view"
    view = {0: 0}

    def score(self, node, ins, outs) -> int:
        data, indices = ins[0], ins[1] if len(ins) > 1 else None
        if data is None or not data.static or not data.shape or indices is None or indices.shape != () \
                or indices.dtype is None or indices.dtype.kind not in "iu" or not outs[0].static:
            return 0
        return 3 if node.attrs.get("axis", 0) % len(data.shape) == 0 else 0

    def prepare(self, node, ins, outs) -> RunFn:
        dim = int(ins[0].shape[0])

        def run(inputs, outputs):
            i = int(inputs[1])
            if i < 0:
                i += dim
            if not 0 <= i < dim:
                raise IndexError(f"index {int(inputs[1])} is out of range for a dimension of size {dim}")
            return (inputs[0][i],)

        return run


class GatherIndices(Kernel):
    """Indices known only at run (an embedding lookup by token or byte ids): bounds checked by one min and one
    max, negative ones wrapped only when there are any, then np.take with mode="clip" straight into the
    planned output (under mode="raise" it buffers; the reference also wraps every index in int64).
    256x32 float32 by 2048 int64 ids: 45-62 us against 400-600 for the reference, on a loaded machine."""

    op_type = "Gather"
    name = "run-indices"

    def score(self, node, ins, outs) -> int:
        data, indices = ins[0], ins[1] if len(ins) > 1 else None
        if data is None or not data.static or not data.shape or indices is None or indices.value is not None \
                or indices.dtype is None or indices.dtype.kind not in "iu" or not outs[0].static:
            return 0
        return 2

    def prepare(self, node, ins, outs) -> RunFn:
        axis = node.attrs.get("axis", 0) % len(ins[0].shape)
        dim = int(ins[0].shape[axis])
        shape, dtype = tuple(outs[0].shape), outs[0].dtype

        def run(inputs, outputs):
            data, idx = inputs
            out = outputs[0] if outputs[0] is not None else np.empty(shape, dtype)
            if idx.size <= FEW_INDICES:
                # NOTE: numpy's own checks (mode="raise": negative indices wrapped, any other out of range raises)
                # instead of a min and a max: a decoder step's one token id took 4.4 us that way, 1.4 this way
                try:
                    return (np.take(data, idx, axis=axis, out=out),)
                except IndexError:
                    bad = next(int(i) for i in idx.reshape(-1) if not -dim <= int(i) < dim)
                    raise IndexError(f"index {bad} is out of range for a dimension of size {dim}") from None
            if idx.size:
                low, high = int(idx.min()), int(idx.max())
                if low < -dim or high >= dim:
                    bad = low if low < -dim else high
                    raise IndexError(f"index {bad} is out of range for a dimension of size {dim}")
                if low < 0:
                    idx = np.where(idx < 0, idx + dim, idx)
            return (np.take(data, idx, axis=axis, out=out, mode="clip"),)

        return run


IMPLEMENTATIONS = (GatherLastAxis, GatherScalarRow, GatherIndices)
