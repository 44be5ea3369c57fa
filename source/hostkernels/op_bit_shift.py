"""BitShift on the CPU: numpy shifts with ONNX's rules for signed and out-of-range amounts."""
from __future__ import annotations

from functools import partial

from nnhal.graph.node import Node
from nnhal.hostkernels._binary import BinaryFn, BinaryKernel, shift
from nnhal.operator.base import Info


class BitShiftKernel(BinaryKernel):
    op_type = "BitShift"

    def function(self, node: Node, ins: list[Info | None], outs: list[Info]) -> BinaryFn:
        return partial(shift, left=node.attrs["direction"] == "LEFT")


IMPLEMENTATIONS = (BitShiftKernel,)
