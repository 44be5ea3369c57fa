"""ConvTranspose on the CPU: GEMM into per-tap columns, then col2im scatter-add."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._nn import scatter_windows
from nnhal.hostkernels.base import Kernel, RunFn, store
from nnhal.operator.table import get_prototype


def _pack(w: np.ndarray, group: int) -> np.ndarray:
    """Weights (C, M/G, *k) -> (G, M/G * prod(k), C/G)."""
    c = w.shape[0]
    return np.ascontiguousarray(w.reshape(group, c // group, -1).transpose(0, 2, 1))


class ConvTransposeKernel(Kernel):
    op_type = "ConvTranspose"

    def prepare(self, node, ins, outs) -> RunFn:
        proto = get_prototype("", "ConvTranspose")
        group = node.attrs["group"]
        packed = _pack(ins[1].value, group) if ins[1].value is not None else None
        dtype = outs[0].dtype

        def run(inputs, outputs):
            x, w = inputs[0], inputs[1]
            bias = inputs[2] if len(inputs) > 2 else None
            g = proto.geometry(node, x.shape, w.shape)
            wg = packed if packed is not None else _pack(w, group)
            nb, c = x.shape[:2]
            spatial = x.shape[2:]
            xg = x.reshape(nb, group, c // group, -1)
            cols = np.matmul(wg[None], xg)  # (N, G, M/G * K, P)
            m = w.shape[1] * group
            cols = cols.reshape((nb, m) + tuple(w.shape[2:]) + spatial)
            y = scatter_windows(cols, g["kernel"], g["strides"], g["dilations"], g["pads"], g["out"])
            if bias is not None:
                y = y + bias.reshape((1, -1) + (1,) * len(spatial))
            return (store(y, outputs[0], dtype),)

        return run


IMPLEMENTATIONS = (ConvTransposeKernel,)
