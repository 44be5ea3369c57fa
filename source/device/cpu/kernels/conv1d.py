"""1-D convolutions (audio front ends, byte and text CNNs) on the native im2col kernel (kernels.c Conv "im2col"):
the (N, C, W) input is turned channels last once, (N, W, C), and run as a 2-D convolution over (N, W, 1, C) with a
(K, 1) kernel, so that each output position is one im2col row (K runs of C contiguous channels) and the positions
split over the native pool even at batch 1; the GEMM, bias and fused activation run per band in C, and the (N, OW,
M) result is turned back to (N, M, OW) once (both turns by the native transpose kernel, transpose_blocks).

NOTE: the numpy path (hostkernels/op_conv.py Conv1dGemm, "gemm-1d") runs the 2-D NCHW kernels on (N, C, 1, W)
views: a strided im2col copy and a GEMM through numpy per band, and its bias and activation as separate passes; on
the audio corpus models' front ends (40-64 channels, 100-200 positions) it took 2-3x onnxruntime's time. Group-1
float32 convolutions with constant weights wider than 1 take this kernel when the native kernels are loaded, and
run on it while the plan uses the pools (else on gemm-1d's numpy path, see run); others keep gemm-1d (a 1-wide
kernel there is one GEMM on the NCW input).
"""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.device.cpu.kernels._conv_nhwc import ALIGN_COLUMNS, NATIVE_BAND_BYTES, act_record
from nnhal.device.cpu.kernels.conv import Conv1dGemm
from nnhal.hostkernels import _conv2d, _scratch
from nnhal.hostkernels.base import RunFn
from nnhal.hostkernels.fused import activation_of
from nnhal.operator.base import Info


class Conv1dNative(Conv1dGemm):
    """A group-1 float32 1-D convolution with constant weights on the native im2col kernel, channels last
    inside (see the module)."""

    name = "native-1d"

    def score(self, node, ins, outs) -> int:
        if not native.available() or node.attrs.get("group", 1) != 1 or ins[0] is None or ins[0].dtype != np.float32:
            return 0
        if ins[1] is not None and ins[1].value is not None and ins[1].value.ndim == 3 and ins[1].value.shape[2] == 1:
            return 0        # a 1-wide kernel is one GEMM on the NCW input in gemm-1d (no im2col, no transposes)
        return 11 if Conv1dGemm.score(self, node, ins, outs) else 0

    #: the input is the channels-last (N, W, C) tensor (fusions.fuse_conv1d_transposes), not (N, C, W)
    channels_last_input = False

    def prepare(self, node, ins, outs) -> RunFn:
        nwc = self.channels_last_input
        if nwc:
            x = ins[0]
            ins = [Info(x.dtype, (x.shape[0], x.shape[2], x.shape[1])), *ins[1:]]
        node2, ins2, outs2 = self.as_2d(node, ins, outs)
        s = _conv2d.conv2d(node2, ins2, outs2)
        (_, k), (_, stride), (_, dilation) = s.kernel, s.strides, s.dilations
        n, c, width, m, ow = s.n, s.c, s.w, s.m, s.ow
        taps = k * c
        ld = -(-taps // ALIGN_COLUMNS) * ALIGN_COLUMNS
        # columns (tap, channel) by output channel; rows past taps stay zero (the aligned row's padding)
        wk = np.zeros((ld, m), np.float32)
        wk[:taps] = np.asarray(ins[1].value, np.float32).transpose(2, 1, 0).reshape(taps, m)
        bias = ins[2].value if len(ins) > 2 and ins[2] is not None else None
        bias = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
        band_rows = max(1, NATIVE_BAND_BYTES // (ld * 4))
        # the 2-D geometry over (N, W, 1, C): positions are rows, the 1-D pads the top one (the bottom one is
        # implied by OW)
        conv = native.Conv("im2col", (n, width, 1, c, ow, 1, m, k, 1, stride, 1, dilation, 1, s.pads[1], 0, ld,
                                      band_rows), wk, bias, act_record(activation_of(node)))
        work = n * ow * (taps + m) + parallel.gemm_work(n * ow * taps * m)
        rows = -(-n * ow // parallel.PIXEL_ALIGN)     # the kernel's parts are ranges of its output pixels
        numpy_run = super().prepare(node, ins, outs)

        def swap(x: np.ndarray, y: np.ndarray, a: int, b: int) -> None:
            """y (n, b, a) = x (n, a, b) transposed: natively for C-contiguous float32 operands (the byte CNN's
            (1, 32, 2048) input in 86 us against numpy's 200, on one thread of a loaded 2-core machine)."""
            if x.flags.c_contiguous and y.flags.c_contiguous and x.dtype == y.dtype == np.float32:
                parts = parallel.native_parts(n * a * b, n * ((b + 15) // 16))
                native.transpose_blocks(x, y, n, a, b, 1, parts)
            else:
                np.copyto(y, x.transpose(0, 2, 1))

        def run(inputs, outputs):
            if not parallel.native_pool():
                # NOTE: the pool is off (a plan of small products) and BLAS has every thread: the linked
                # OpenBLAS threaded inside the native call was measured 5-20x slower on a loaded 2-core machine
                # (as native_im2col, the numpy kernels run then)
                return numpy_run([inputs[0].transpose(0, 2, 1), *inputs[1:]] if nwc else inputs, outputs)
            parts = parallel.native_parts(work, rows)
            xt, yt, cols = _scratch.scratch(((n, width, c), np.float32), ((n, ow, m), np.float32),
                                            ((parts * band_rows * ld,), np.float32))
            if not nwc:
                swap(inputs[0], xt, c, width)
            elif inputs[0].flags.c_contiguous:
                xt = inputs[0]                  # already the channels-last rows the kernel reads
            else:
                np.copyto(xt, inputs[0])
            conv.run(xt, yt, cols, parts)
            y = outputs[0] if outputs[0] is not None else np.empty((n, m, ow), np.float32)
            swap(yt, y, ow, m)
            return (y,)

        return run


class Conv1dChannelsLast(Conv1dNative):
    """Conv1dNative reading a channels-last (N, W, C) input as it is: the Transpose (0, 2, 1) that made the
    (N, C, W) input is gone (fusions.fuse_conv1d_transposes; not in the selection table)."""

    name = "native-1d, nwc input"
    channels_last_input = True


IMPLEMENTATIONS = (Conv1dNative,)
