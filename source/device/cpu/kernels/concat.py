"""Concat on the cpu device: each input copied into its rows of the output by the native kernel (kernels.c via
native/nn_concat.h ``copy_rows``), split over the native pool (the reference: hostkernels/op_concat.py).

A Concat along axis k of C-contiguous tensors copies, per input, ``rows`` (the product of the axes before k)
rows of the input's extent from k on into the output's rows at the input's offset. A channel Concat of a
channels-last region has one row per pixel of a few dozen bytes: numpy's strided ``copyto`` loops per pixel
there (DenseNet's NHWC channel Concats: 21% of its run). Like the reference it ``writes_in_place``: an input the
plan placed inside the output (plan.concat_slices) is already there and is skipped.
"""
from __future__ import annotations

import weakref
from functools import partial

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.hostkernels.base import Kernel, RunFn

# NOTE: below this many bytes in all a Concat is a few microseconds either way: the reference's copyto is kept
MIN_BYTES = 4096


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


class ConcatNative(Kernel):
    """A static Concat of C-contiguous inputs of one dtype, by rows (see the module docstring)."""

    op_type = "Concat"
    name = "native"
    writes_in_place = True

    @staticmethod
    def takes(ins, outs) -> bool:
        """The native kernels are there and the inputs and output are static tensors of one dtype and rank."""
        out = outs[0] if outs else None
        if not native.available() or out is None or not out.static or not out.shape or out.dtype is None \
                or out.dtype.hasobject:
            return False
        return all(i is not None and i.static and i.dtype == out.dtype and len(i.shape) == len(out.shape)
                   for i in ins)

    def score(self, node, ins, outs) -> int:
        if not self.takes(ins, outs):
            return 0
        return 2 if int(np.prod(outs[0].shape, dtype=np.int64)) * outs[0].dtype.itemsize >= MIN_BYTES else 0

    def prepare(self, node, ins, outs) -> RunFn:
        shape = tuple(outs[0].shape)
        dtype = outs[0].dtype
        axis = node.attrs["axis"] % len(shape)
        rows = int(np.prod(shape[:axis], dtype=np.int64))
        unit = int(np.prod(shape[axis + 1:], dtype=np.int64)) * dtype.itemsize      # bytes per step of the axis
        stride = shape[axis] * unit
        # (input position, byte width of its row, byte offset in the output's row); empty inputs copy nothing
        parts_of, off = [], 0
        for k, info in enumerate(ins):
            width = int(info.shape[axis]) * unit
            if width:
                parts_of.append((k, width, off))
            off += width
        work = rows * stride // 4

        # NOTE: per input, weak references to the last (input, output) pair found in place. An array's data never
        # moves, and the plan hands a step the same arena views every run, so the address check (a dict built
        # by __array_interface__, ~2 us each, three per input: most of a ShuffleNet Concat that copies nothing)
        # runs once per pair; a shared session's threads at worst redo it. Weak: no arena is kept alive here.
        placed: list = [None] * len(ins)

        def run(inputs, outputs):
            out = outputs[0]
            if out is None:
                out = np.empty(shape, dtype)
            elif not out.flags.c_contiguous:            # not planned so; numpy's copies keep it correct anyway
                np.concatenate(inputs, axis, out=out)
                return (out,)
            y = base = None
            # NOTE: parts at run time, not prepare: the pool's threads are the run's (num_thread), and a plan
            # prepared while another session had set them kept that count (woke a worker on a one-thread run)
            parts = parallel.native_parts(work, rows) if parallel.native_pool() else 1
            for k, width, offset in parts_of:
                x = inputs[k]
                seen = placed[k]
                if seen is not None and seen[0]() is x and seen[1]() is out:
                    continue                                # in place, as this same pair was before
                # an input placed inside the output is a view of the same buffer (the arena)
                if x.base is not None and (x.base is out.base or x.base is out):
                    base = _address(out) if base is None else base
                    if _address(x) == base + offset and all(
                            s == t for s, t, n in zip(x.strides, out.strides, x.shape) if n > 1):
                        placed[k] = (weakref.ref(x), weakref.ref(out))
                        continue                                # already in place (plan.concat_slices)
                if not x.flags.c_contiguous:
                    x = np.ascontiguousarray(x)
                if y is None:
                    y = out.reshape(-1).view(np.uint8)
                native.copy_rows(x.reshape(-1).view(np.uint8), y, rows, width, width, 0, stride, offset, parts)
            return (out,)

        def bind(inputs, outputs):
            # NOTE: a planned step (straight.bind): the copies of the inputs not placed in the output already
            # (plan.concat_slices; the arena's layout is the set's, so what is in place stays so), each one native
            # call on the fixed buffers, split chosen once; an input that is not C-contiguous declines (its run
            # copies it first: a bound call must read it where it lies)
            out = outputs[0]
            if out is None or not out.flags.c_contiguous or out.shape != shape or out.dtype != dtype:
                return None
            parts = parallel.native_parts(work, rows) if parallel.native_pool() else 1
            y, base, calls = out.reshape(-1).view(np.uint8), _address(out), []
            for k, width, offset in parts_of:
                x = inputs[k]
                if x is None or x.dtype != dtype:
                    return None
                if x.base is not None and (x.base is out.base or x.base is out) and _address(x) == base + offset \
                        and all(s == t for s, t, n in zip(x.strides, out.strides, x.shape) if n > 1):
                    continue
                if not x.flags.c_contiguous or np.may_share_memory(x, out):
                    return None
                calls.append(partial(native.copy_rows, x.reshape(-1).view(np.uint8), y, rows, width, width, 0,
                                     stride, offset, parts))
            if len(calls) == 1:
                return calls[0]
            calls = tuple(calls)

            def bound() -> None:
                for call in calls:
                    call()

            return bound

        run.bind = bind
        return run


class ConcatRounded(ConcatNative):
    """A float32 Concat whose whole output is then rounded to float16 values in place (fp16 storage: a
    KV-cache Concat whose output leaves the subgraph, castfuse.fuse_rounded_concats): the rows copied as
    ConcatNative copies them, then one native rounding pass over the output while it is in cache. Not in the
    selection table: the fusion chooses it, for a Concat of any size (two rounding steps fewer is worth it
    on a small cache too)."""

    name = "native, rounded"

    def prepare(self, node, ins, outs) -> RunFn:
        copy = super().prepare(node, ins, outs)
        cast = native.cast_half

        def run(inputs, outputs):
            (out,) = copy(inputs, outputs)
            flat = out.reshape(-1) if out.flags.c_contiguous else np.ascontiguousarray(out).reshape(-1)
            cast(flat, flat)
            if not np.shares_memory(flat, out):         # a strided output the plan did not lay out so
                np.copyto(out, flat.reshape(out.shape))
            return (out,)

        return run


IMPLEMENTATIONS = (ConcatNative,)
