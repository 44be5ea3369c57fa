"""BlackmanWindow on the CPU."""
from __future__ import annotations

from nnhal.hostkernels._reduce import WindowKernel, blackman


class BlackmanWindowKernel(WindowKernel):
    op_type = "BlackmanWindow"
    shape = blackman


IMPLEMENTATIONS = (BlackmanWindowKernel,)
