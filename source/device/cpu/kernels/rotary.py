"""The CPU plan's fused rotary embedding step (device/cpu/rotary_fuse.py): ``x * cos + rotate_half(x) * sin`` with
``rotate_half(x) = concat(-x[..., h:], x[..., :h])`` in one native call (native/kernels.c ``nn_rotary_f32``: the
chain's two products and one sum per element, in its order), instead of the exported Slice, Slice, Neg, Concat,
Mul, Mul and Add steps. The reference is those steps (hostkernels)."""
from __future__ import annotations

from functools import partial

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.device.cpu.kernels._io import contiguous_io, planned_io
from nnhal.hostkernels.base import Kernel, RunFn


class RotaryNative(Kernel):
    """Inputs x, cos, sin (float32, static; cos and sin of one shape broadcasting to x's over one block of axes,
    the ``mid`` rows of x between ``outer`` and ``inner`` rows, the last axis of even width ``D`` shared); output
    x's shape."""

    op_type = "RotaryHalf"
    name = "native rotary"

    def __init__(self, mid: int, inner: int):
        self.mid, self.inner = int(mid), int(inner)

    def score(self, node, ins, outs) -> int:
        return 10 if native.available() else 0

    def prepare(self, node, ins, outs) -> RunFn:
        mid, inner = self.mid, self.inner
        f32 = np.dtype(np.float32)
        shape = tuple(outs[0].shape)
        t_shape = tuple(ins[1].shape)
        size = int(np.prod(shape, dtype=np.int64))
        rows = size // shape[-1] if shape[-1] else 0

        def parts() -> int:
            return parallel.native_parts(size * 4 * 3, rows) if parallel.native_pool() else 1

        def run(inputs, outputs):
            x, y = contiguous_io(inputs, outputs, shape, np.float32)
            c, s = (np.ascontiguousarray(a) for a in inputs[1:])
            native.rotary(x, c, s, y, mid, inner, parts())
            return (y,)

        def bind(inputs, outputs):
            # NOTE: a planned step (straight.bind): the native call on the fixed buffers, split chosen once
            if not planned_io(inputs, outputs, shape, shape, f32) or any(
                    a is None or a.dtype != f32 or a.shape != t_shape or not a.flags.c_contiguous
                    for a in inputs[1:]):
                return None
            return partial(native.rotary, inputs[0], inputs[1], inputs[2], outputs[0], mid, inner, parts())

        run.bind = bind
        return run
