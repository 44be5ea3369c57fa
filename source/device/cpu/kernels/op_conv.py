"""Conv on the CPU: N-d im2col + GEMM (reference).

The input is padded into a buffer, windows are gathered with a strided view,
and each group is one matrix product with the weights packed at prepare.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from nnhal.device.cpu.kernels.base import Kernel, RunFn, store
from nnhal.operator.table import get_prototype


def im2col(x: np.ndarray, kernel: list[int], strides: list[int], dilations: list[int],
           pads: list[int]) -> tuple[np.ndarray, list[int]]:
    """Windows of x (N, C, *S) as a view (N, C, *out, *kernel) after padding."""
    n = len(kernel)
    if any(pads):
        width = [(0, 0), (0, 0)] + [(pads[i], pads[i + n]) for i in range(n)]
        x = np.pad(x, width)
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    win = sliding_window_view(x, spans, axis=tuple(range(2, 2 + n)))
    index = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides) \
        + tuple(slice(None, None, d) for d in dilations)
    win = win[index]
    return win, list(win.shape[2:2 + n])


class ConvIm2col(Kernel):
    op_type = "Conv"
    name = "reference"

    def prepare(self, node, ins, outs) -> RunFn:
        proto = get_prototype("", "Conv")
        group = node.attrs["group"]
        has_bias = len(ins) > 2 and ins[2] is not None
        x_info, w_info = ins[0], ins[1]
        dtype = outs[0].dtype
        packed: dict[str, np.ndarray] = {}
        if w_info.value is not None:
            packed["w"] = _pack(w_info.value, group)

        def run(inputs, outputs):
            x, w = inputs[0], inputs[1]
            g = proto.geometry(node, x.shape, w.shape)
            wg = packed["w"] if "w" in packed else _pack(w, group)
            win, out_sizes = im2col(x, g["kernel"], g["strides"], g["dilations"], g["pads"])
            nb, c = x.shape[0], x.shape[1]
            nsp = len(out_sizes)
            # (N, C, *out, *k) -> (N, G, C/G * prod(k), prod(out))
            perm = (0, 1, *range(2 + nsp, 2 + 2 * nsp), *range(2, 2 + nsp))
            cols = np.ascontiguousarray(win.transpose(perm)).reshape(nb, group, -1, int(np.prod(out_sizes)))
            y = np.matmul(wg[None], cols)  # (N, G, M/G, P)
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
