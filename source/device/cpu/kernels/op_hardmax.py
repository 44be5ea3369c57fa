"""Hardmax on the CPU."""
from __future__ import annotations

from nnhal.device.cpu.kernels._reduce import SoftmaxFamilyKernel, hardmax


class HardmaxKernel(SoftmaxFamilyKernel):
    op_type = "Hardmax"
    function = hardmax


IMPLEMENTATIONS = (HardmaxKernel,)
