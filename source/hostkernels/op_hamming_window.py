"""HammingWindow on the CPU."""
from __future__ import annotations

from nnhal.hostkernels._reduce import WindowKernel, hamming


class HammingWindowKernel(WindowKernel):
    op_type = "HammingWindow"
    shape = hamming


IMPLEMENTATIONS = (HammingWindowKernel,)
