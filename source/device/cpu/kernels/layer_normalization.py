"""LayerNormalization on the cpu device, fast: float32 input and stash, normalizing the last axis, only Y wanted,
static shape: the row means are one BLAS product, the centered input is built in the output buffer, the variance
is one einsum (no squared temporary), then scale and bias in place (as repeated blocks when constant); blocks of
rows spread over the cpu device's pool (parallel.py). With the native kernels and constant (or absent) scale
and bias: native/kernels.c nn_layernorm_f32, one row at a time in L1, rows split over the native pool. The
reference: hostkernels/op_layer_normalization.py.

RMSNormalization over the last axis, float32, with a constant scale of that axis (or none): native/kernels.c
nn_rmsnorm_f32, the same row split. The plan's rmsnorm_fuse.py makes such nodes out of the exported chain
Pow -> ReduceMean -> Add -> Sqrt -> Div -> Mul. The reference: hostkernels/op_rms_normalization.py.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.device.cpu.kernels._io import contiguous_io, planned_io
from nnhal.hostkernels import _blocks
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.operator._nn import STASH_TYPES


def _last_axis_f32(node, x) -> bool:
    """A normalization these kernels take: float32 input of a static non-empty shape and stash, over the last
    axis."""
    return x is not None and x.dtype == np.float32 and x.shape is not None and x.static and bool(x.shape) \
        and 0 not in x.shape and STASH_TYPES.get(int(node.attrs["stash_type"])) == np.float32 \
        and node.attrs["axis"] in (-1, len(x.shape) - 1)


class LayerNormalizationFast(Kernel):
    op_type = "LayerNormalization"
    name = "fast"
    inplace = {0: 0}

    def score(self, node, ins, outs) -> int:
        if not _last_axis_f32(node, ins[0]) or any(o for o in node.outputs[1:]):
            return 0
        for p in ins[1:3]:
            if p is not None and (p.shape is None or len(p.shape) > 1 or p.dtype != np.float32):
                return 0
        return 10

    def prepare(self, node, ins, outs) -> RunFn:
        eps = np.float32(node.attrs["epsilon"])
        shape = tuple(ins[0].shape)
        width = shape[-1]
        n_out = len(outs)
        # the row means as one BLAS product with a vector of 1/width (3 us against np.mean's 14 on 128x384),
        # constant scale and bias as repeated blocks over the flat output (kernels/_blocks.py)
        averager = np.full(width, 1 / width, np.float32)
        # (ufunc, input index, repeated block when the operand is a constant of the axis' width, else None)
        steps = [(ufunc, k, _blocks.tiled(np.ascontiguousarray(ins[k].value.reshape(-1)))
                  if ins[k].value is not None and ins[k].value.size == width else None)
                 for ufunc, k in ((np.multiply, 1), (np.add, 2)) if k < len(ins) and ins[k] is not None]

        # the native kernel when scale and bias are constants (or absent): one pass per row, split over rows
        consts = [ins[k].value if k < len(ins) and ins[k] is not None else None for k in (1, 2)]
        native_ok = native.available() and all(
            (k >= len(ins) or ins[k] is None or (v is not None and v.size == width))
            for k, v in zip((1, 2), consts))
        scale_c, bias_c = (None if v is None else np.ascontiguousarray(v.reshape(-1), dtype=np.float32) for v in consts)
        rows_total = int(np.prod(shape[:-1], dtype=np.int64))

        def run(inputs, outputs):
            x = inputs[0]
            if not x.flags.c_contiguous:
                x = np.ascontiguousarray(x)
            y = outputs[0] if outputs[0] is not None else np.empty(shape, np.float32)
            if native_ok and y.flags.c_contiguous:
                parts = parallel.native_parts(x.size * 4, rows_total) if parallel.native_pool() else 1
                native.layernorm(x, y, scale_c, bias_c, float(eps), parts)
                return (y,) + (None,) * (n_out - 1)
            xr, yr = x.reshape(-1, width), y.reshape(-1, width)
            operands = [(ufunc, None if block is not None else np.broadcast_to(inputs[k], shape).reshape(-1, width),
                         block) for ufunc, k, block in steps]

            def part(r0: int, r1: int) -> None:
                rows, d = xr[r0:r1], yr[r0:r1]
                mean = np.matmul(rows, averager)[:, None]
                np.subtract(rows, mean, out=d)
                var = np.einsum("ij,ij->i", d, d)[:, None]
                var /= np.float32(width)
                var += eps
                inv = np.sqrt(var, out=var)
                np.reciprocal(inv, out=inv)
                d *= inv
                flat = d.reshape(-1)
                for ufunc, operand, block in operands:
                    if block is not None:
                        _blocks.blockwise(ufunc, flat, block, flat)
                    else:
                        ufunc(d, operand[r0:r1], out=d)

            parallel.for_ranges(xr.shape[0], x.size * 4, part)
            return (y,) + (None,) * (n_out - 1)

        def bind(inputs, outputs):
            # NOTE: a planned step (straight.bind): the native call on the fixed buffers, split chosen once
            if not native_ok or any(o is not None for o in outputs[1:]) \
                    or not planned_io(inputs, outputs, shape, shape, np.dtype(np.float32)):
                return None
            x, y = inputs[0], outputs[0]
            parts = parallel.native_parts(x.size * 4, rows_total) if parallel.native_pool() else 1
            return partial(native.layernorm, x, y, scale_c, bias_c, float(eps), parts)

        run.bind = bind
        return run


class RMSNormalizationNative(Kernel):
    op_type = "RMSNormalization"
    name = "native"
    inplace = {0: 0}

    def score(self, node, ins, outs) -> int:
        x = ins[0]
        if not native.available() or not _last_axis_f32(node, x):
            return 0
        scale = ins[1] if len(ins) > 1 else None
        if scale is not None and (scale.value is None or scale.dtype != np.float32
                                  or scale.value.size != x.shape[-1] or len(scale.value.shape) > 1):
            return 0
        return 10

    def prepare(self, node, ins, outs) -> RunFn:
        eps = float(np.float32(node.attrs["epsilon"]))
        shape = tuple(ins[0].shape)
        rows_total = int(np.prod(shape[:-1], dtype=np.int64))
        scale = ins[1].value if len(ins) > 1 and ins[1] is not None else None
        scale_c = None if scale is None else np.ascontiguousarray(scale.reshape(-1), dtype=np.float32)

        def parts(x) -> int:
            return parallel.native_parts(x.size * 4, rows_total) if parallel.native_pool() else 1

        def run(inputs, outputs):
            x, y = contiguous_io(inputs, outputs, shape, np.float32)
            native.rmsnorm(x, y, scale_c, eps, parts(x))
            return (y,)

        def bind(inputs, outputs):
            # NOTE: a planned step (straight.bind): the native call on the fixed buffers, split chosen once
            if not planned_io(inputs, outputs, shape, shape, np.dtype(np.float32)):
                return None
            return partial(native.rmsnorm, inputs[0], outputs[0], scale_c, eps, parts(inputs[0]))

        run.bind = bind
        return run


IMPLEMENTATIONS = (LayerNormalizationFast, RMSNormalizationNative)
