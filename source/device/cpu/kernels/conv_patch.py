"""A patch embedding on the cpu device: a 2-D convolution whose kernel equals its strides (no padding,
no dilation, one group), as ViT, Swin and ConvNeXt stems export it. Its windows do not overlap, so its
im2col is one reordering copy of the input, (N, C, OH, KH, OW, KW) -> (N, C, KH, KW, OH, OW), and the
convolution one GEMM per image, W (M, C*KH*KW) @ columns (C*KH*KW, OH*OW), written straight into the NCHW
output; then the bias and a fused activation. The general kernels copied it tap by tap (256 copies for
16x16) or ran the direct kernel through channels-last copies: ViT's 3->192 16x16 stem on 112x112 took
~600 us that way against ~215 us as reshape + GEMM (min of 300, loaded 2-core Zen 3).
"""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu import parallel
from nnhal.device.cpu.kernels._gates import fused
from nnhal.hostkernels import _conv2d
from nnhal.hostkernels.base import Kernel, RunFn


class ConvPatch(Kernel):
    """2-D convolution with kernel == strides, no padding or dilation, group 1 (a patch embedding)."""

    op_type = "Conv"
    name = "patch"
    fuse_activation = True

    def score(self, node, ins, outs) -> int:
        g = _conv2d.geometry(node, ins, outs)
        if g is None or node.attrs["group"] != 1 or list(g["kernel"]) != list(g["strides"]) \
                or any(g["pads"]) or any(d != 1 for d in g["dilations"]) or list(g["kernel"]) == [1, 1]:
            return 0
        return 12       # above the general kernel (10): a 1x1 stays its plain GEMM there

    def prepare(self, node, ins, outs) -> RunFn:
        s = _conv2d.conv2d(node, ins, outs)
        (kh, kw), k = s.kernel, s.c * s.kernel[0] * s.kernel[1]
        weights = np.ascontiguousarray(ins[1].value.reshape(s.m, k), dtype=s.dtype)
        bias = ins[2].value.astype(s.dtype).reshape(s.m, 1) if len(ins) > 2 and ins[2] is not None else None
        shape, cols_shape = (s.n, s.m, s.oh, s.ow), (s.n, k, s.oh * s.ow)

        def run(inputs, outputs):
            x = inputs[0][:, :, :s.oh * kh, :s.ow * kw]     # rows and columns past the last window: unused
            cols = np.ascontiguousarray(x.reshape(s.n, s.c, s.oh, kh, s.ow, kw).transpose(0, 1, 3, 5, 2, 4))
            cols = cols.reshape(cols_shape)
            y = outputs[0] if outputs[0] is not None and outputs[0].flags.c_contiguous else np.empty(shape, s.dtype)
            y3 = y.reshape(s.n, s.m, s.oh * s.ow)
            for b in range(s.n):
                parallel.matmul(weights, cols[b], out=y3[b])
            if bias is not None:
                np.add(y3, bias, out=y3)
            return (y,)

        return fused(run, node)


IMPLEMENTATIONS = (ConvPatch,)
