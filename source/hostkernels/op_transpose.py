"""Transpose on the CPU.

reference: numpy's strided copy. rows: a static permutation that keeps the last axis last, over rows of
at least MIN_ROW_BYTES, moves whole rows: one np.take of the contiguous rows by an index computed at
prepare (attention's head split and merge, (N, heads, T, d) <-> (N, T, heads, d))."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._shape import put
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator.op_transpose import permutation

# NOTE: (64, 3, 49, 32) -> perm (0, 2, 1, 3) took 30 us as a row take against 62 as numpy's transposing copy,
# (512, 3, 49, 32) 315 against 542, (128, 6, 49, 32) 115 against 240 (hot caches); in the models, one
# thread, minimum of 4 profiles on a loaded machine: ViT-B/16's 36 head transposes 2.37 -> 1.46 ms, Swin-T
# batch 8's 12 head merges 3.86 -> 3.36 ms (medians within the noise). Single elements per row would be a
# per-element gather, slower than the strided copy
MIN_ROW_BYTES = 32
MAX_ROWS = 1 << 22          # the row index is an intp per row: at most 32 MB


class TransposeKernel(Kernel):
    op_type = "Transpose"

    def prepare(self, node, ins, outs) -> RunFn:
        def run(inputs, outputs):
            x = inputs[0]
            return (put(np.transpose(x, permutation(node, x.ndim)), outputs[0]),)

        return run


class TransposeRows(Kernel):
    op_type = "Transpose"
    name = "rows"

    def score(self, node, ins, outs) -> int:
        x = ins[0] if ins else None
        if x is None or not x.static or x.dtype is None or len(x.shape) < 2:
            return 0
        try:
            perm = list(permutation(node, len(x.shape)))
        except ValueError:
            return 0            # the reference kernel reports the bad perm
        rows = int(np.prod(x.shape[:-1], dtype=np.int64))
        if perm[-1] != len(perm) - 1 or perm == sorted(perm) or not 0 < rows <= MAX_ROWS \
                or x.shape[-1] * x.dtype.itemsize < MIN_ROW_BYTES:
            return 0
        return 2

    def prepare(self, node, ins, outs) -> RunFn:
        shape = tuple(ins[0].shape)
        perm = tuple(permutation(node, len(shape)))
        width, out_shape = shape[-1], tuple(shape[p] for p in perm)
        rows = np.arange(int(np.prod(shape[:-1], dtype=np.int64)), dtype=np.intp).reshape(shape[:-1])
        index = np.ascontiguousarray(rows.transpose(perm[:-1]).reshape(-1))

        def run(inputs, outputs):
            x, given = inputs[0], outputs[0]
            if not x.flags.c_contiguous:
                return (put(np.transpose(x, perm), given),)
            y = given if given is not None and given.flags.c_contiguous else np.empty(out_shape, x.dtype)
            np.take(x.reshape(-1, width), index, axis=0, out=y.reshape(-1, width), mode="clip")
            return (y if given is None or y is given else put(y, given),)

        return run


IMPLEMENTATIONS = (TransposeKernel, TransposeRows)
