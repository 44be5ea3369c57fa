"""ConvTranspose on the cpu device, channels last: one GEMM on the pool, then the taps' slabs in place
(beside the host's NCHW kernel, hostkernels/op_conv_transpose.py, which ConvTransposeFused runs with a fused
activation). Both take the activation the plan fuses into the node (fusions.fuse_activations): the Relu after a
decoder's upsampling, the Sigmoid of a DBNet-style probability head, applied with the bias in one epilogue."""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu import parallel
from nnhal.device.cpu.kernels import _gates
from nnhal.device.cpu.kernels._conv_nhwc import _epilogue
from nnhal.errors import ShapeError, where
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.fused import activation_of
from nnhal.hostkernels.op_conv_transpose import ConvTransposeKernel
from nnhal.operator.table import get_prototype


class ConvTransposeNHWC(Kernel):
    """2-D transposed convolution of a channels-last image (group 1, static shapes; weights and bias constant,
    or run-time tensors packed at each run): one GEMM of the (N*H*W, C) pixels by the (C, kh*kw*M) taps,
    then each tap's (N, H, W, M) slab added at its strided place in the output; when the taps tile the
    output exactly (stride = kernel, no dilation, pads or output padding: U-Net and DBNet upsampling) the
    product is the output, reordered by one copy, or with at most 8 output channels one product per kernel
    row writes its output rows in place."""

    op_type = "ConvTranspose"
    name = "nhwc"
    layout = "NHWC"
    fuse_activation = True

    def score(self, node, ins, outs) -> int:
        x, w = ins[0], ins[1]
        if x is None or w is None or x.shape is None or len(x.shape) != 4 or not x.static \
                or x.dtype not in (np.float32, np.float64) or node.attrs["group"] != 1:
            return 0
        # run-time weights (and bias: a dynamic-filter decoder) of static shape and the input's dtype are
        # packed at each run
        if w.value is None and (not w.static or w.dtype != x.dtype) or len(_shape(w)) != 4:
            return 0
        b = ins[2] if len(ins) > 2 else None
        if b is not None and b.value is None and (not b.static or b.dtype != x.dtype):
            return 0
        return 1 if outs[0].static else 0

    def prepare(self, node, ins, outs) -> RunFn:
        g = get_prototype("", "ConvTranspose").geometry(node, ins[0].shape, _shape(ins[1]))
        (kh, kw), (sh, sw), (dh, dw) = g["kernel"], g["strides"], g["dilations"]
        ph, pw, oh, ow = g["pads"][0], g["pads"][1], g["out"][0], g["out"][1]
        n, c, h, wd = ins[0].shape
        dtype = ins[0].dtype
        m = _shape(ins[1])[1]

        def pack(wv: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(wv.reshape(c, m, kh * kw).transpose(0, 2, 1).reshape(c, kh * kw * m), dtype)

        const_taps = None if ins[1].value is None else pack(ins[1].value)
        with_bias = len(ins) > 2 and ins[2] is not None
        const_bias = ins[2].value.astype(dtype) if with_bias and ins[2].value is not None else None
        act = activation_of(node)
        # the bias (tiled to an output row) and the fused activation in place on the output, in one epilogue
        const_finish = _epilogue(const_bias, act, dtype, ow * m) if const_bias is not None or not with_bias \
            else None
        tiles = (sh, sw) == (kh, kw) and (dh, dw) == (1, 1) and not any(g["pads"]) and (oh, ow) == (h * kh, wd * kw)
        # the uncropped output: positions p * s + t * d - start, start = min(0, pad) as scatter_windows has it
        starts = (min(0, ph), min(0, pw))
        full = (max((h - 1) * sh + (kh - 1) * dh + 1, ph + oh) - starts[0],
                max((wd - 1) * sw + (kw - 1) * dw + 1, pw + ow) - starts[1])

        def row_taps_of(taps: np.ndarray) -> list[np.ndarray]:
            """The taps of each kernel row i as (C, kw*M): output rows i::kh are input rows times them."""
            return [np.ascontiguousarray(taps.reshape(c, kh, kw * m)[:, i]) for i in range(kh)]

        # NOTE: with few output channels the tiled output is written in place, kh products of (W, C) rows by
        # the row taps into its contiguous (W, kw*M) blocks: the one product then 6-D transposing copy (inner
        # run M) took 0.20 / 0.50-0.68 ms for DBNet's (1, 80, 80, 8) -> 8 and (1, 160, 160, 8) -> 1 heads
        # against 0.11 / 0.18-0.23 (one BLAS thread, loaded 2-core machine); at 64 -> 32 the two were even on
        # one thread and the one product splits over the pool, so wider outputs keep it
        in_place = tiles and m <= 8
        const_rows = row_taps_of(const_taps) if in_place and const_taps is not None else None

        def run(inputs, outputs):
            taps = const_taps if const_taps is not None else pack(_checked(node, inputs[1], (c, m, kh, kw)))
            finish = const_finish if const_finish is not None \
                else _epilogue(_checked(node, inputs[2], (m,)), act, dtype, ow * m)
            y = outputs[0]
            if y is None or not y.flags.c_contiguous:
                y = np.empty((n, oh, ow, m), dtype)
            if in_place:
                rows = const_rows if const_rows is not None else row_taps_of(taps)
                x3 = inputs[0].reshape(n * h, wd, c)
                y4 = y.reshape(n * h, kh, wd, kw * m)
                for i in range(kh):
                    np.matmul(x3, rows[i], out=y4[:, i])
            else:
                cols = parallel.matmul(inputs[0].reshape(n * h * wd, c), taps).reshape(n, h, wd, kh, kw, m)
                if tiles:
                    np.copyto(y.reshape(n, h, kh, wd, kw, m), cols.transpose(0, 1, 3, 2, 4, 5))
                else:
                    buf = np.zeros((n, *full, m), dtype)
                    for i in range(kh):
                        for j in range(kw):
                            r0, c0 = i * dh - starts[0], j * dw - starts[1]
                            buf[:, r0:r0 + (h - 1) * sh + 1:sh, c0:c0 + (wd - 1) * sw + 1:sw] += cols[:, :, :, i, j]
                    np.copyto(y, buf[:, ph - starts[0]:ph - starts[0] + oh, pw - starts[1]:pw - starts[1] + ow])
            finish(y)
            return (y,)

        return run


class ConvTransposeFused(ConvTransposeKernel):
    """The host's NCHW ConvTranspose (any rank and group) with the activation the plan fused into the node
    applied in place on its output: the kernel a ConvTranspose has before the layout pass, so that
    fusions.fuse_activations can fold its activation whether the node then stays NCHW or becomes channels last
    (ConvTransposeNHWC)."""

    # NOTE: still the host's reference kernel (a GEMM into taps, then a numpy col2im): the profile's coverage
    # counts it as reference time (profiling.category), with or without the activation it applies
    name = "reference+activation"
    fuse_activation = True

    def score(self, node, ins, outs) -> int:
        return 2

    def prepare(self, node, ins, outs) -> RunFn:
        return _gates.fused(super().prepare(node, ins, outs), node)


def _shape(info) -> tuple:
    """The shape of a constant or run-time operand."""
    return tuple(info.value.shape if info.value is not None else info.shape)


def _checked(node, value: np.ndarray, shape: tuple) -> np.ndarray:
    """A run-time weight or bias of the shape the plan was prepared for, else a ShapeError naming the node."""
    if value.shape != shape:
        raise ShapeError(f"{where(node)} on device 'cpu': a run-time operand of shape {list(value.shape)}; the "
                         f"plan was prepared for {list(shape)}")
    return value


IMPLEMENTATIONS = (ConvTransposeNHWC, ConvTransposeFused)
