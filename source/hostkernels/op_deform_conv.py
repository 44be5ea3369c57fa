"""DeformConv on the CPU: bilinear sampling at offset taps, mask, then grouped GEMM."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._nn import sample_points
from nnhal.hostkernels.base import Kernel, RunFn, store


class DeformConvKernel(Kernel):
    op_type = "DeformConv"

    def prepare(self, node, ins, outs) -> RunFn:
        a = node.attrs
        group, og = int(a["group"]), int(a["offset_group"])
        dtype = outs[0].dtype

        def run(inputs, outputs):
            x, w, offset = inputs[:3]
            bias = inputs[3] if len(inputs) > 3 else None
            mask = inputs[4] if len(inputs) > 4 else None
            n, c, h, wd = x.shape
            m = w.shape[0]
            kh, kw = (a["kernel_shape"] or w.shape[2:])
            sh, sw = a["strides"] or (1, 1)
            dh, dw = a["dilations"] or (1, 1)
            ph, pw = (a["pads"] or (0, 0, 0, 0))[:2]
            oh, ow = offset.shape[2:]
            off = offset.reshape(n, og, kh, kw, 2, oh, ow).astype(np.float64)
            ty = (np.arange(kh) * dh)[:, None, None, None] + (np.arange(oh) * sh - ph)[None, None, :, None]
            tx = (np.arange(kw) * dw)[None, :, None, None] + (np.arange(ow) * sw - pw)[None, None, None, :]
            ys = (off[:, :, :, :, 0] + ty).reshape(n * og, -1)
            xs = (off[:, :, :, :, 1] + tx).reshape(n * og, -1)
            work = np.result_type(x.dtype, np.float32)
            flat = x.reshape(n * og, c // og, h * wd)
            cols = sample_points(flat, [h, wd], [ys, xs], "linear", "zeros", [(0, h - 1), (0, wd - 1)], work)
            if mask is not None:
                cols *= mask.reshape(n * og, 1, -1).astype(work)
            cols = cols.reshape(n, group, (c // group) * kh * kw, oh * ow)
            wg = w.reshape(group, m // group, -1).astype(work)
            y = np.matmul(wg[None], cols).reshape(n, m, oh, ow)
            if bias is not None:
                y += bias.reshape(1, -1, 1, 1)
            return (store(y, outputs[0], dtype),)

        return run


IMPLEMENTATIONS = (DeformConvKernel,)
