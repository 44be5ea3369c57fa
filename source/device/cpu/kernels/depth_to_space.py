"""DepthToSpace on the cpu device inside a channels-last region (the reference: hostkernels/op_depth_to_space.py).

A super-resolution net ends in a convolution to C * r * r channels and a DepthToSpace (PixelShuffle) to an
(N, C, H * r, W * r) image. With only the reference the layout pass converted the convolution's NHWC output to
NCHW first and the reference moved it again; here the layout pass (device/cpu/layout.py CHANNELS_LAST) gives
the NHWC input to this kernel, which moves each element once: into NHWC (a channels-last reader follows) or,
by the ``nchw_output`` hook, straight into the ONNX layout. DCR into NHWC, and into NCHW of one channel (a
grey-level image), is a block transpose (the native tiled transpose); otherwise one numpy copy of a permuted
view: the input seen as (N, H, W, r, r, C) (DCR) or (N, H, W, C, r, r) (CRD), the output as (N, H, r, W, r, C)
or (N, C, H, r, W, r). Only moves: bit-equal to the reference.
"""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.hostkernels.base import Kernel, RunFn

# axes of the 6-D input view (n, h, w, then DCR: i, j, c / CRD: c, i, j) in the order of the 6-D output view
_NHWC_ORDER = {"DCR": (0, 1, 3, 2, 4, 5), "CRD": (0, 1, 4, 2, 5, 3)}
_NCHW_ORDER = {"DCR": (0, 5, 1, 3, 2, 4), "CRD": (0, 3, 1, 4, 2, 5)}


class DepthToSpaceNHWC(Kernel):
    """A static 4-D DepthToSpace whose input is stored channels last; output channels last too."""

    op_type = "DepthToSpace"
    name = "nhwc"
    layout = "NHWC"
    nchw = False

    def score(self, node, ins, outs) -> int:
        x = ins[0] if ins else None
        if x is None or not x.static or x.dtype is None or len(x.shape) != 4 or not outs or not outs[0].static:
            return 0
        return 3 if node.attrs.get("mode", "DCR") in _NHWC_ORDER else 0

    def nchw_output(self, node, ins, outs) -> Kernel | None:
        """The variant that writes the output in ONNX's NCHW layout (the layout pass's hook)."""
        return DepthToSpaceToNCHW()

    def prepare(self, node, ins, outs) -> RunFn:
        n, crr, h, w = (int(d) for d in ins[0].shape)
        r = int(node.attrs["blocksize"])
        c = crr // (r * r)
        mode = node.attrs.get("mode", "DCR")
        x6 = (n, h, w, r, r, c) if mode == "DCR" else (n, h, w, c, r, r)
        if self.nchw:
            order, out6, shape = _NCHW_ORDER[mode], (n, c, h, r, w, r), (n, c, h * r, w * r)
        else:
            order, out6, shape = _NHWC_ORDER[mode], (n, h, r, w, r, c), (n, h * r, w * r, c)
        dtype = outs[0].dtype
        # DCR into NHWC, or into NCHW of one channel, is a block transpose of (N * H, W, r) blocks of r * C
        # elements: the native tiled transpose (kernels.c transpose_blocks) where the elements are 4 bytes
        blocks = mode == "DCR" and (not self.nchw or c == 1) and native.available() and dtype is not None \
            and np.dtype(dtype).itemsize == 4
        work = n * h * w * crr

        def run(inputs, outputs):
            x, out = inputs[0], outputs[0]
            if out is None or not out.flags.c_contiguous:
                out = np.empty(shape, dtype)
            if blocks and x.flags.c_contiguous and x.dtype == out.dtype:
                parts = parallel.native_parts(work, n * h) if parallel.native_pool() else 1
                native.transpose_blocks(x, out, n * h, w, r, r * c, parts)
            else:
                np.copyto(out.reshape(out6), x.reshape(x6).transpose(order))
            return (out,)

        return run


class DepthToSpaceToNCHW(DepthToSpaceNHWC):
    """The same reading the channels-last input and writing NCHW (only the layout pass takes it)."""

    name = "nhwc-to-nchw"
    nchw = True

    def nchw_output(self, node, ins, outs) -> Kernel | None:
        return self


IMPLEMENTATIONS = (DepthToSpaceNHWC,)
