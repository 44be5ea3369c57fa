"""The integer products in numpy (float BLAS on exact integer values) on the cpu device: the host's kernels
(hostkernels/op_matmul_integer.py, op_qlinear_matmul.py, op_qlinear_conv.py, ms_qgemm.py,
ms_matmul_integer_to_float.py, ms_dynamic_quantize_matmul.py, ms_qattention.py,
nn_dynamic_quantize_gemm.py) with their products
on the pool; the per-token quantization of DynamicQuantizeGemm's blocks and its GEMM with the bias by the native
kernels; QLinearGlobalAveragePool with a channels-last variant for the layout pass's quantized regions (qlayout.py).
The integer kernels proper (qnative) are integer.py's.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.device.cpu.kernels._pooled import Pooled
from nnhal.device.cpu.kernels.qdq import DynamicQuantizeLinearNative
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.ms_dynamic_quantize_matmul import DynamicQuantizeMatMulKernel
from nnhal.hostkernels.ms_matmul_integer_to_float import MatMulIntegerToFloatKernel
from nnhal.hostkernels.ms_qattention import QAttentionKernel
from nnhal.hostkernels.ms_qgemm import QGemmKernel
from nnhal.hostkernels.ms_qlinear_global_average_pool import QLinearGlobalAveragePoolKernel
from nnhal.hostkernels.nn_dynamic_quantize_gemm import DynamicQuantizeGemmKernel
from nnhal.hostkernels.op_dynamic_quantize_linear import DynamicQuantizeLinearKernel
from nnhal.hostkernels.op_matmul_integer import MatMulIntegerKernel
from nnhal.hostkernels.op_qlinear_conv import PackedQLinearConv
from nnhal.hostkernels.op_qlinear_matmul import QLinearMatMulKernel


class MatMulIntegerPooled(Pooled, MatMulIntegerKernel):
    pass


class QLinearMatMulPooled(Pooled, QLinearMatMulKernel):
    pass


class PackedQLinearConvPooled(Pooled, PackedQLinearConv):
    name = "packed-pooled"


class QGemmPooled(Pooled, QGemmKernel):
    pass


class MatMulIntegerToFloatPooled(Pooled, MatMulIntegerToFloatKernel):
    pass


class QAttentionPooled(Pooled, QAttentionKernel):
    """The QKV projection and the attention products on the pool."""

    product = MatMulIntegerToFloatPooled()


class DynamicQuantizeMatMulPooled(DynamicQuantizeMatMulKernel):
    """A quantized by the native pass (numpy's where the native kernels are off), its product on the pool."""

    name = "pooled"
    quantize = DynamicQuantizeLinearNative()
    product = MatMulIntegerToFloatPooled()

    def quantizer(self) -> DynamicQuantizeLinearKernel:
        return self.quantize if native.available() else DynamicQuantizeMatMulKernel.quantize

    def score(self, node, ins, outs) -> int:
        s = super().score(node, ins, outs)
        return s + 1 if s > 0 else 0


class DynamicQuantizeGemmNative(Pooled, DynamicQuantizeGemmKernel):
    """Blocks quantized in one native pass and their GEMM with the bias added by each part of the pool."""

    name = "native"

    def quantize_blocks(self, x: np.ndarray, block: int, signed: bool) -> np.ndarray:
        if native.available() and x.dtype == np.float32 and x.flags.c_contiguous:
            xq = np.empty_like(x)
            native.fake_quantize_blocks(x, xq, block, signed)     # the numpy steps, in one pass
            return xq
        return super().quantize_blocks(x, block, signed)

    def gemm_bias(self, xq: np.ndarray, wt: np.ndarray, out: np.ndarray, bias: np.ndarray | None) -> bool:
        return native.available() and xq.dtype == np.float32 and xq.flags.c_contiguous \
            and parallel.gemm(xq, wt, out, bias, None)


class QLinearGlobalAveragePoolCPU(QLinearGlobalAveragePoolKernel):
    """The host's kernel (exact integer sums, one float32 rescale), which offers the layout pass a channels-last
    variant: ResNet's last stage then stays NHWC up to its pooled (N, C, 1, 1) codes."""

    name = "cpu"

    def score(self, node, ins, outs) -> int:
        return 2

    def channels_last(self, node, ins, outs) -> Kernel | None:
        """The NHWC form for the layout pass (layout.py): a 4-D channels-first node, input 0 and output 0 stored
        (N, H, W, C) and (N, 1, 1, C)."""
        four = len(ins[0].shape) == 4 and not node.attrs.get("channels_last", 0)
        return _GLOBAL_POOL_NHWC if four else None


class QLinearGlobalAveragePoolNHWC(QLinearGlobalAveragePoolKernel):
    """Channels last: the same integer sums over the pixels (axes 1, 2), so the same codes as channels first."""

    name = "cpu nhwc"

    def prepare(self, node, ins, outs) -> RunFn:
        return super().prepare(replace(node, attrs={**node.attrs, "channels_last": 1}), ins, outs)


_GLOBAL_POOL_NHWC = QLinearGlobalAveragePoolNHWC()

IMPLEMENTATIONS = (MatMulIntegerPooled, QLinearMatMulPooled, PackedQLinearConvPooled)
# the kernels of the other domains' ops, by domain
DOMAINS = {"com.microsoft": (QGemmPooled, MatMulIntegerToFloatPooled, DynamicQuantizeMatMulPooled,
                             QAttentionPooled, QLinearGlobalAveragePoolCPU),
           "ai.nnhal": (DynamicQuantizeGemmNative,)}
