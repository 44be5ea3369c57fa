"""Hardmax on the CPU."""
from __future__ import annotations

from nnhal.hostkernels._reduce import SoftmaxFamilyKernel, hardmax


class HardmaxKernel(SoftmaxFamilyKernel):
    op_type = "Hardmax"
    function = hardmax


IMPLEMENTATIONS = (HardmaxKernel,)
