"""SoftmaxCrossEntropyLoss on the CPU."""
from __future__ import annotations

from nnhal.hostkernels._reduce import LossKernel


class SoftmaxCrossEntropyLossKernel(LossKernel):
    op_type = "SoftmaxCrossEntropyLoss"
    log_softmax_first = True


IMPLEMENTATIONS = (SoftmaxCrossEntropyLossKernel,)
