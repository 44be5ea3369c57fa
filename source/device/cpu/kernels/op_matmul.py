"""MatMul on the CPU: np.matmul into the output; (…, K) @ (K, N) as one flat GEMM."""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.kernels._scratch import fused
from nnhal.device.cpu.kernels.base import Kernel, RunFn


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """numpy matmul; a stacked A times a matrix B becomes one 2-D product."""
    if b.ndim == 2 and a.ndim > 2 and a.flags.c_contiguous:
        flat = a.reshape(-1, a.shape[-1])
        if out is not None and out.flags.c_contiguous:
            np.matmul(flat, b, out=out.reshape(-1, b.shape[1]))
            return out
        return np.matmul(flat, b).reshape(a.shape[:-1] + (b.shape[1],))
    if out is not None:
        return np.matmul(a, b, out=out)
    return np.matmul(a, b)


class MatMulKernel(Kernel):
    op_type = "MatMul"
    fuse_activation = True   # a Relu/Clip fused by the CPU plan runs in place on the result

    def prepare(self, node, ins, outs) -> RunFn:
        def run(inputs, outputs):
            return (matmul(inputs[0], inputs[1], outputs[0]),)

        return fused(run, node)


IMPLEMENTATIONS = (MatMulKernel,)
