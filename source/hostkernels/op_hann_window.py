"""HannWindow on the CPU."""
from __future__ import annotations

from nnhal.hostkernels._reduce import WindowKernel, hann


class HannWindowKernel(WindowKernel):
    op_type = "HannWindow"
    shape = hann


IMPLEMENTATIONS = (HannWindowKernel,)
