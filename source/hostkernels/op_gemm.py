"""Gemm on the CPU: one BLAS matmul into the output, alpha folded into constant B, beta into C."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._blocks import NUMPY_GATES
from nnhal.hostkernels._scratch import fused
from nnhal.hostkernels.base import Kernel, RunFn, store


class GemmKernel(Kernel):
    op_type = "Gemm"
    # the matrix product; the cpu device's subclass runs it on its pool (device/cpu/kernels/_pooled.py)
    matmul = staticmethod(np.matmul)
    # the gates of a fused activation (hostkernels/_blocks.py); the cpu device's subclass passes native ones
    gates = NUMPY_GATES
    fuse_activation = True   # a Relu/Clip fused by the CPU plan runs in place on the result

    def prepare(self, node, ins, outs) -> RunFn:
        alpha, beta = float(node.attrs["alpha"]), float(node.attrs["beta"])
        trans_a, trans_b = bool(node.attrs["transA"]), bool(node.attrs["transB"])
        dtype = outs[0].dtype
        exact = dtype.kind == "f"
        has_c = len(ins) > 2 and ins[2] is not None and beta != 0
        b_const = ins[1].value
        c_const = ins[2].value if has_c else None
        # NOTE: integer Gemm with non-unit alpha/beta is computed in float64 and cast back.
        scale_b = exact and alpha != 1 and b_const is not None
        b_packed = None
        if b_const is not None:
            b_packed = b_const.T if trans_b else b_const
            if scale_b:
                b_packed = b_packed * dtype.type(alpha)
            # NOTE: BLAS reads a transposed (Fortran-ordered) B as fast as a C-ordered one: copying a
            # transB weight to C order cost VGG's 400 MB classifier seconds of prerun and a second copy.
            if not (b_packed.flags.c_contiguous or b_packed.flags.f_contiguous):
                b_packed = np.ascontiguousarray(b_packed)
        c_packed = None
        if c_const is not None and exact:
            c_packed = c_const * dtype.type(beta) if beta != 1 else c_const

        def run(inputs, outputs):
            a = inputs[0].T if trans_a else inputs[0]
            b = b_packed if b_packed is not None else (inputs[1].T if trans_b else inputs[1])
            if not exact and (alpha != 1 or beta != 1):
                y = alpha * self.matmul(a, b).astype(np.float64)
                if has_c:
                    y += beta * inputs[2].astype(np.float64)
                return (store(y, outputs[0], dtype),)
            out = outputs[0]
            y = self.matmul(a, b, out=out) if out is not None else self.matmul(a, b)
            if alpha != 1 and not scale_b:
                y *= dtype.type(alpha)
            if has_c:
                c = c_packed if c_packed is not None else inputs[2]
                if c_packed is None and beta != 1:
                    c = c * dtype.type(beta)
                y += c
            return (y,)

        return fused(run, node, self.gates)


IMPLEMENTATIONS = (GemmKernel,)
