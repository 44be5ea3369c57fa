"""Softmax on the CPU."""
from __future__ import annotations

from nnhal.device.cpu.kernels._reduce import SoftmaxFamilyKernel, softmax


class SoftmaxKernel(SoftmaxFamilyKernel):
    op_type = "Softmax"
    function = softmax


IMPLEMENTATIONS = (SoftmaxKernel,)
