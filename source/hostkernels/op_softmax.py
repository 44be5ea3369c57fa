"""Softmax on the CPU: the shared stable softmax (the cpu device's fast variant: device/cpu/kernels/softmax.py)."""
from __future__ import annotations

from nnhal.hostkernels._reduce import SoftmaxFamilyKernel, softmax


class SoftmaxKernel(SoftmaxFamilyKernel):
    op_type = "Softmax"
    function = softmax


IMPLEMENTATIONS = (SoftmaxKernel,)
