"""Conv on the CPU, reference: N-d im2col + GEMM.

The input is padded into a buffer, windows are gathered with a strided view, and each group is one
matrix product with the weights packed at prepare. The cpu device's fast 2-D kernels (GEMM without
im2col, Winograd, channels last) are in device/cpu/kernels/conv.py.
"""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn, store
from nnhal.hostkernels.windows import im2col
from nnhal.operator.table import get_prototype


class ConvIm2col(Kernel):
    op_type = "Conv"
    name = "reference"
    # the product of packed weights and columns; a device's subclass may run it on its own threads
    matmul = staticmethod(np.matmul)

    def prepare(self, node, ins, outs) -> RunFn:
        proto = get_prototype("", "Conv")
        group = node.attrs["group"]
        has_bias = len(ins) > 2 and ins[2] is not None
        w_info = ins[1]
        dtype = outs[0].dtype
        packed: dict[str, np.ndarray] = {}
        if w_info.value is not None:
            packed["w"] = _pack(w_info.value, group)

        def run(inputs, outputs):
            x, w = inputs[0], inputs[1]
            if "w" not in packed:       # weights known only now: check them as inference would have
                proto.check_operands(node, x.shape, w.shape)
            g = proto.geometry(node, x.shape, w.shape)
            wg = packed["w"] if "w" in packed else _pack(w, group)
            win, out_sizes = im2col(x, g["kernel"], g["strides"], g["dilations"], g["pads"])
            nb = x.shape[0]
            nsp = len(out_sizes)
            # (N, C, *out, *k) -> (N, G, C/G * prod(k), prod(out))
            perm = (0, 1, *range(2 + nsp, 2 + 2 * nsp), *range(2, 2 + nsp))
            cols = np.ascontiguousarray(win.transpose(perm)).reshape(nb, group, -1, int(np.prod(out_sizes)))
            y = self.matmul(wg[None], cols)  # (N, G, M/G, P)
            y = y.reshape(nb, w.shape[0], *out_sizes)
            if has_bias:
                y += inputs[2].reshape((1, -1) + (1,) * nsp)
            return (store(y, outputs[0], dtype),)

        return run


def _pack(w: np.ndarray, group: int) -> np.ndarray:
    """Weights (M, C/G, *k) -> (G, M/G, C/G * prod(k))."""
    m = w.shape[0]
    return np.ascontiguousarray(w.reshape(group, m // group, -1))


IMPLEMENTATIONS = (ConvIm2col,)
