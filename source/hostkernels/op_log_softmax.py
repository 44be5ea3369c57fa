"""LogSoftmax on the CPU."""
from __future__ import annotations

from nnhal.hostkernels._reduce import SoftmaxFamilyKernel, log_softmax


class LogSoftmaxKernel(SoftmaxFamilyKernel):
    op_type = "LogSoftmax"
    function = log_softmax


IMPLEMENTATIONS = (LogSoftmaxKernel,)
