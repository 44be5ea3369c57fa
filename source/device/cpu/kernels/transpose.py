"""Transpose on the cpu device, beside the numpy kernels (hostkernels/op_transpose.py):

* ``reshape``: a permutation that only moves axes of size 1 is a reshape, a view without a copy. Exporters emit
  these around recurrent ops at batch 1 ((T, 1, C) <-> (1, T, C) for one step: a streaming body's frame and
  output).
* ``swap``: a permutation that is a swap of two axis groups (after dropping axes of size 1 and merging axes that
  stay neighbours): y (outer, b, a, inner) from x (outer, a, b, inner), by the native tiled transpose (kernels.c
  transpose_blocks), which moves 4-byte words: 4-byte elements, and 1-, 2- and 8-byte elements whose inner run
  is a whole number of words (an 8-bit attention head of 32 codes is 8 words). Covers a sequence model's
  (N, C, T) <-> (N, T, C), attention's head split and merge (N, T, heads, d) <-> (N, heads, T, d) and a
  matrix's (A, B) -> (B, A).
"""
from __future__ import annotations

from functools import partial

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.device.cpu.kernels._io import contiguous_io, planned_io
from nnhal.device.cpu.kernels.view import view_run
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator.op_transpose import permutation


def swap_groups(shape: tuple[int, ...], perm: tuple[int, ...]) -> tuple[int, int, int, int] | None:
    """(outer, a, b, inner) when transposing ``shape`` by ``perm`` swaps two adjacent groups of axes, else None
    (also for the identity: nothing to swap)."""
    kept = [p for p in perm if shape[p] != 1]
    # runs of input axes that stay consecutive in the output merge into one
    groups: list[list[int]] = []
    for p in kept:
        if groups and groups[-1][-1] + 1 == p:
            groups[-1].append(p)
        else:
            groups.append([p])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])      # the groups in input order
    rank = {g: i for i, g in enumerate(order)}
    q = [rank[g] for g in range(len(groups))]                             # output position -> input group
    size = [int(np.prod([shape[p] for p in groups[order[i]]], dtype=np.int64)) for i in range(len(groups))]
    for s in range(len(q) - 1):
        swapped = list(range(len(q)))
        swapped[s], swapped[s + 1] = s + 1, s
        if q == swapped:
            outer = int(np.prod(size[:s], dtype=np.int64))
            inner = int(np.prod(size[s + 2:], dtype=np.int64))
            return outer, size[s], size[s + 1], inner
    return None


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
        return 4 if moved == sorted(moved) else 0

    def prepare(self, node, ins, outs) -> RunFn:
        return view_run(tuple(ins[0].shape[p] for p in permutation(node, len(ins[0].shape))))


class TransposeSwap(Kernel):
    op_type = "Transpose"
    name = "swap"

    def score(self, node, ins, outs) -> int:
        x = ins[0] if ins else None
        if not native.available() or x is None or not x.static or x.dtype is None or not x.shape \
                or x.dtype.itemsize not in (1, 2, 4, 8):
            return 0
        try:
            perm = tuple(permutation(node, len(x.shape)))
        except ValueError:
            return 0            # the reference kernel reports the bad perm
        groups = swap_groups(tuple(x.shape), perm)
        return 3 if groups is not None and groups[3] * x.dtype.itemsize % 4 == 0 else 0

    def prepare(self, node, ins, outs) -> RunFn:
        shape = tuple(ins[0].shape)
        perm = tuple(permutation(node, len(shape)))
        outer, a, b, inner = swap_groups(shape, perm)
        out_shape, dtype = tuple(shape[p] for p in perm), ins[0].dtype
        words = inner * dtype.itemsize // 4         # the kernel moves 4-byte words: an inner run is this many
        work, units = outer * a * b * words, outer * ((b + 15) // 16)
        transpose = native.transpose_blocks
        as_words = dtype.itemsize != 4

        def run(inputs, outputs):
            x, y = contiguous_io(inputs, outputs, out_shape, dtype)
            parts = parallel.native_parts(work, units) if parallel.native_pool() else 1
            if as_words:
                transpose(x.reshape(-1).view(np.uint32), y.reshape(-1).view(np.uint32), outer, a, b, words, parts)
            else:
                transpose(x, y, outer, a, b, inner, parts)
            return (y,)

        def bind(inputs, outputs):
            # NOTE: a planned step (straight.bind): the native call on the fixed buffers, split chosen once
            if not planned_io(inputs, outputs, shape, out_shape, dtype):
                return None
            x, y = inputs[0], outputs[0]
            parts = parallel.native_parts(work, units) if parallel.native_pool() else 1
            if as_words:
                return partial(transpose, x.reshape(-1).view(np.uint32), y.reshape(-1).view(np.uint32), outer, a, b,
                               words, parts)
            return partial(transpose, x, y, outer, a, b, inner, parts)

        run.bind = bind
        return run


IMPLEMENTATIONS = (TransposeReshape, TransposeSwap)
