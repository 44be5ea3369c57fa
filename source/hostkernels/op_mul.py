"""Mul on the CPU: one numpy ufunc into the output buffer, in place when input 0 dies here; a per-channel
scale of a channels-last map (a squeeze-excite gate, ConvNeXt's layer scale) against a repeated block."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels import _blocks
from nnhal.hostkernels._binary import BinaryKernel

# NOTE: numpy multiplies (1, H, W, C) by (1, 1, 1, C) with a stride-0 outer loop; against a block of the
# vector tiled to _blocks.BLOCK it runs 1.4-1.8x faster on the benchmark machine (56x56x96: 69 -> 42 us,
# 112x112x32: 111 -> 55 us; 14x14x384: 13.3 -> 11.5). Tiling a gate computed at run time costs ~6 us,
# so a run-time vector is tiled only for maps of at least RUNTIME_MIN elements; a constant one is tiled
# once at prepare, for maps of at least CONSTANT_MIN.
CONSTANT_MIN = 1 << 14
RUNTIME_MIN = 1 << 17
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


class MulKernel(BinaryKernel):
    op_type = "Mul"
    ufunc = np.multiply


def channel_operand(ins, outs, per_image: bool = False) -> int | None:
    """Which input (0 or 1) is a vector along the output's last axis when the other has the output's
    shape, all of one float dtype and static; else None. ``per_image``: the vector may also be one per
    image, shaped (N, 1, ..., 1, C) against an output (N, ..., C) (a squeeze-excite gate)."""
    if len(ins) != 2 or any(i is None or not i.static or i.dtype not in _FLOATS for i in ins) \
            or not outs[0].static or outs[0].dtype != ins[0].dtype or ins[1].dtype != ins[0].dtype:
        return None
    out = tuple(outs[0].shape)
    if len(out) < 2 or out[-1] < 2:
        return None
    for k in (0, 1):
        full, vec = tuple(ins[1 - k].shape), tuple(ins[k].shape)
        if full != out or len(vec) > len(out) or vec[-1:] != out[-1:]:
            continue
        lead = vec[1:-1] if per_image and len(vec) == len(out) and vec[0] == out[0] else vec[:-1]
        if all(d == 1 for d in lead):
            return k
    return None


class ChannelMulKernel(BinaryKernel):
    """(..., C) times a (C,)-like vector, blockwise against the vector tiled (_blocks.tiled)."""

    op_type = "Mul"
    ufunc = np.multiply
    name = "fast"

    def score(self, node, ins, outs) -> int:
        k = channel_operand(ins, outs)
        if k is None:
            return 0
        size = int(np.prod(outs[0].shape))
        return 2 if size >= (CONSTANT_MIN if ins[k].value is not None else RUNTIME_MIN) else 0

    def prepare(self, node, ins, outs):
        k = channel_operand(ins, outs)
        dtype, shape = outs[0].dtype, tuple(outs[0].shape)
        const = ins[k].value
        block = None if const is None else _blocks.tiled(np.asarray(const, dtype).reshape(-1))

        def run(inputs, outputs):
            x, y = inputs[1 - k], outputs[0]
            if y is None:
                y = np.empty(shape, dtype)
            if not (x.flags.c_contiguous and y.flags.c_contiguous):
                np.multiply(inputs[0], inputs[1], out=y)
                return (y,)
            b = block if block is not None else _blocks.tiled(inputs[k].reshape(-1))
            _blocks.blockwise(np.multiply, x.reshape(-1), b, y.reshape(-1))
            return (y,)

        return run


IMPLEMENTATIONS = (MulKernel, ChannelMulKernel)
