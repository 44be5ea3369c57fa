"""MatMul on the CPU, reference: np.matmul into the output; (…, K) @ (K, N) as one flat GEMM.

The CPU plan may fuse what follows a MatMul into its node (never under NNHAL_CPU_REFERENCE=1): the
FusedNode's ``epilogue`` (EpilogueOp records, hostkernels/fused.py) applies element-wise Add/Mul/Div/Sub
by further node inputs (bias, scale, mask, residual) in place on the product, possibly ended by a Gelu
step, an exact float32 Gelu. The reference applies the steps one after another over the whole product;
the cpu device's fast kernel (device/cpu/kernels/matmul.py) does it blockwise, natively, on its pool.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnhal.hostkernels._scratch import fused
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.fused import epilogue_of
from nnhal.hostkernels.op_gelu import gelu_inplace

UFUNCS = {"Add": np.add, "Mul": np.multiply, "Div": np.divide, "Sub": np.subtract}


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None,
           product: Callable[..., np.ndarray] = np.matmul) -> np.ndarray:
    """``product`` (numpy's matmul, or a device's with the same signature); a stacked A times a matrix B
    becomes one 2-D product.

    NOTE: numpy runs a stacked (…, M, K) @ (K, N) as a loop of small GEMMs that OpenBLAS does not thread
    (ConvNeXt's (1, 56, 56, 96) @ (96, 384): 1.73 ms strided, 1.45 contiguous against 1.15 as one 2-D
    GEMM at 2 threads), so a strided A is copied first (1.30 ms with the copy) and a strided output
    takes the product from a temporary."""
    if b.ndim == 2 and a.ndim > 2:
        flat = a.reshape(-1, a.shape[-1])   # a view when a's strides allow, else one contiguous copy
        shape = a.shape[:-1] + (b.shape[1],)
        if out is None:
            return product(flat, b).reshape(shape)
        if out.flags.c_contiguous:
            product(flat, b, out=out.reshape(-1, b.shape[1]))
        else:
            np.copyto(out, product(flat, b).reshape(shape))
        return out
    if out is not None:
        return product(a, b, out=out)
    return product(a, b)


class MatMulKernel(Kernel):
    op_type = "MatMul"
    fuse_activation = True   # a Relu/Clip fused by the CPU plan runs in place on the result

    def prepare(self, node, ins, outs) -> RunFn:
        epilogue = epilogue_of(node)
        gelu = bool(epilogue) and epilogue[-1].op == "Gelu"
        ops = tuple((UFUNCS[step.op], step.input) for step in (epilogue[:-1] if gelu else epilogue))

        def run(inputs, outputs):
            y = matmul(inputs[0], inputs[1], outputs[0])
            for ufunc, k in ops:
                ufunc(y, inputs[k], out=y)
            if gelu:
                if y.flags.c_contiguous:
                    gelu_inplace(y)
                else:
                    y[...] = gelu_inplace(np.ascontiguousarray(y))
            return (y,)

        return fused(run, node)


IMPLEMENTATIONS = (MatMulKernel,)
