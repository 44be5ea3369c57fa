"""The cpu device's fast kernels: native or pooled variants of host kernels (nnhal.hostkernels keeps the numpy
references that constant folding and the other devices share). The cpu device's plan chooses among both:
:func:`select` is the host select with this folder's table as its ``extra`` kernels.

NOTE: issue 24 step 3 is under way; the fast kernels still in hostkernels/ are listed in tests/test_layering.py
(FAST_PATH_STILL_IN_HOSTKERNELS) until they move here.
"""
from __future__ import annotations

from nnhal.device.cpu.kernels import (
    add,
    batch_normalization,
    cast,
    control,
    conv1d,
    gather,
    layer_normalization,
    recurrent,
    resize,
    softmax,
    split,
    transpose,
)
from nnhal.graph.node import Node
from nnhal.hostkernels.base import Kernel
from nnhal.hostkernels.select import kernel_table
from nnhal.hostkernels.select import select as host_select
from nnhal.operator.base import Info

FAST = kernel_table(cls for module in (add, batch_normalization, cast, control, conv1d, gather, layer_normalization,
                                               recurrent, resize, softmax, split, transpose)
                    for cls in module.IMPLEMENTATIONS)


def select(node: Node, ins: list[Info | None], outs: list[Info], layout: str | None = None) -> Kernel:
    """The best kernel for this node on the cpu device: a host kernel or one of this folder's."""
    return host_select(node, ins, outs, layout, extra=FAST)
