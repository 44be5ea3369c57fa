"""Add and Sum with a fused activation in one native pass (see _add_native), beside their numpy references."""
from __future__ import annotations

from nnhal.device.cpu.kernels import _add_native
from nnhal.hostkernels.op_add import AddKernel
from nnhal.hostkernels.op_sum import SumKernel


class AddNative(_add_native.OnePass, AddKernel):
    """Same-shape float32 operands: with a fused activation one native pass (see _add_native), else numpy's."""


class SumNative(_add_native.OnePass, SumKernel):
    """Same-shape float32 inputs (two): with a fused activation one native pass (see _add_native), else numpy's."""


IMPLEMENTATIONS = (AddNative, SumNative)
