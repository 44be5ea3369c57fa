"""DFT: discrete Fourier transform along one signal axis (real or complex input, RFFT, IRFFT)."""
from __future__ import annotations

from typing import Any

from nnhal.graph.node import Node
from nnhal.operator._reduce import dft_axis, scalar_of
from nnhal.operator.base import Info, Prototype


class DFT(Prototype):
    op_type = "DFT"
    versions = (17, 20)
    inputs = (1, 3)

    def attributes_for(self, version: int) -> dict[str, Any]:
        if version < 20:
            return {"axis": 1, "inverse": 0, "onesided": 0}
        return {"inverse": 0, "onesided": 0}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        irfft = bool(node.attrs["inverse"]) and bool(node.attrs["onesided"])
        if x.shape is None:
            return [Info(x.dtype, None)]
        rank = len(x.shape)
        if rank < 2 or x.shape[-1] not in (1, 2, None):
            raise self.fail(node, f"input shape {x.shape} must end in 1 (real) or 2 (complex)")
        last = 1 if irfft else 2
        axis = self.axis_of(node, ins, rank)
        if axis is None:
            return [Info(x.dtype, (None,) * (rank - 1) + (last,))]
        length = self.length_of(node, ins, x.shape[axis])
        if length is not None and length < 1:
            raise self.fail(node, f"dft_length must be >= 1, got {length}")
        size = length // 2 + 1 if (length is not None and node.attrs["onesided"] and not node.attrs["inverse"]) \
            else length
        shape = list(x.shape)
        shape[axis] = size
        shape[-1] = last
        return [Info(x.dtype, tuple(shape))]

    def axis_of(self, node: Node, ins: list[Info | None], rank: int) -> int | None:
        """The normalized DFT axis, or None when it is a non-constant input."""
        if node.version < 20:
            return dft_axis(node, node.attrs["axis"], rank)
        info = ins[2] if len(ins) > 2 else None
        if info is None:
            return dft_axis(node, -2, rank)
        value = scalar_of(info)
        return None if value is None else dft_axis(node, int(value), rank)

    def length_of(self, node: Node, ins: list[Info | None], size: int | None) -> int | None:
        """The DFT length: the dft_length input, else the (IRFFT-aware) default."""
        info = ins[1] if len(ins) > 1 else None
        if info is not None:
            value = scalar_of(info)
            return None if value is None else int(value)
        if size is None:
            return None
        if node.attrs["inverse"] and node.attrs["onesided"]:
            return 2 * (size - 1)
        return size
