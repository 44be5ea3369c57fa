"""LogSoftmax on the CPU."""
from __future__ import annotations

from nnhal.device.cpu.kernels._reduce import SoftmaxFamilyKernel, log_softmax


class LogSoftmaxKernel(SoftmaxFamilyKernel):
    op_type = "LogSoftmax"
    function = log_softmax


IMPLEMENTATIONS = (LogSoftmaxKernel,)
