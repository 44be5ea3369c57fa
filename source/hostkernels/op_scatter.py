"""Scatter on the CPU: ScatterElements without reduction."""
from __future__ import annotations

from nnhal.hostkernels.op_scatter_elements import ScatterElementsKernel


class ScatterKernel(ScatterElementsKernel):
    op_type = "Scatter"


IMPLEMENTATIONS = (ScatterKernel,)
