"""The tanh-approximated Gelu chain of the CPU plan: ``fuse_gelu_tanh`` turns the element-wise spelling that
torch.onnx exports for ``GELU(approximate="tanh")`` and for GPT-2's NewGELU,

    0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))

(x^3 as Pow(x, 3) or Mul(x, Mul(x, x)); the 0.5 applied last or to x first; operands of Add/Mul in
either order), into one ``Gelu(approximate="tanh")`` node, which the cpu device's native kernel runs in
one pass and fuse_matmul folds into the producing GEMM. Nine float32 passes (a reference Tanh among them)
become one; the fused result is within a few ulp of the chain's (kernels/gelu.py, GeluTanhNative).
"""
from __future__ import annotations

import math

import numpy as np

from nnhal.device.cpu.fusions import Chosen, _readers, _scalar
from nnhal.device.cpu.kernels import select
from nnhal.errors import NnhalError
from nnhal.graph.node import Node

_F32 = np.dtype(np.float32)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715


def fuse_gelu_tanh(chosen: list[Chosen], external: set[str]) -> list[Chosen]:
    """Every float32 tanh-Gelu chain around a Tanh node, whose intermediates have no other reader and do
    not leave the subgraph, becomes one Gelu(approximate="tanh") node at the chain's last position, when a
    non-reference kernel takes it (the native one)."""
    reads, reader, producer = _readers(chosen)
    dropped: set[int] = set()
    replaced: dict[int, Chosen] = {}
    match = _Matcher(chosen, external, reads, reader, producer, dropped)
    for pos, entry in enumerate(chosen):
        if entry.node.op_type != "Tanh" or entry.node.domain or pos in dropped:
            continue
        found = match.chain(pos)
        if found is None:
            continue
        x, x_info, last, absorbed = found
        out = chosen[last]
        gelu = Node(f"{entry.node.name}/gelu", "Gelu", [x], [out.node.outputs[0]], {"approximate": "tanh"},
                    opset=20, version=20)
        try:
            kernel = select(gelu, [x_info], [out.outs[0]])
        except NnhalError:
            continue
        if kernel.name == "reference":
            continue
        replaced[last] = Chosen(gelu, kernel, [x_info], [out.outs[0]])
        dropped.update(j for j in absorbed if j != last)
    return [replaced.get(pos, entry) for pos, entry in enumerate(chosen) if pos not in dropped]


class _Matcher:
    """Walks the chain around one Tanh through single-reader intermediates (positions in ``chosen``)."""

    def __init__(self, chosen, external, reads, reader, producer, dropped) -> None:
        self.chosen, self.external, self.reads = chosen, external, reads
        self.reader, self.producer, self.dropped = reader, producer, dropped

    def _private(self, name: str) -> bool:
        return bool(name) and name not in self.external and self.reads[name] == 1

    def _made(self, name: str, op: str) -> int | None:
        """The position of the node of type ``op`` making ``name``, when nothing else reads ``name``."""
        j = self.producer.get(name)
        if j is None or not self._private(name) or j in self.dropped:
            return None
        node = self.chosen[j].node
        return j if node.op_type == op and not node.domain and len(node.inputs) == 2 else None

    def _read(self, name: str, op: str) -> int | None:
        """The position of the one node of type ``op`` reading ``name``."""
        j = self.reader.get(name)
        if j is None or not self._private(name) or j in self.dropped:
            return None
        node = self.chosen[j].node
        return j if node.op_type == op and not node.domain and len(node.inputs) == 2 else None

    def _by_scalar(self, j: int, value: float) -> tuple[str, int] | None:
        """(the other input, its index) of the binary node at ``j`` whose one input is the float32 scalar."""
        node, _, ins, _ = self.chosen[j]
        for k in (0, 1):
            if _scalar(ins[k], value, _F32) and not _scalar(ins[1 - k], value, _F32):
                return node.inputs[1 - k], 1 - k
        return None

    def _cube(self, name: str, x: str) -> list[int] | None:
        """The positions computing ``name`` = x^3: Pow(x, 3) or Mul(x, Mul(x, x)) (either order)."""
        j = self._made(name, "Pow")
        if j is not None:
            node, _, ins, _ = self.chosen[j]
            return [j] if node.inputs[0] == x and _scalar(ins[1], 3.0, _F32) else None
        j = self._made(name, "Mul")
        if j is None or self.chosen[j].node.inputs.count(x) != 1:
            return None
        inputs = self.chosen[j].node.inputs
        sq = inputs[1] if inputs[0] == x else inputs[0]
        i = self._made(sq, "Mul")
        return [i, j] if i is not None and self.chosen[i].node.inputs == [x, x] else None

    def chain(self, pos: int) -> tuple[str, object, int, list[int]] | None:
        """(x, x's Info, the last position, every position of the chain) of the chain through the Tanh at
        ``pos``, or None."""
        tanh = self.chosen[pos]
        if tanh.ins[0] is None or tanh.ins[0].dtype != _F32 or tanh.outs[0].dtype != _F32:
            return None
        j_scale = self._made(tanh.node.inputs[0], "Mul")
        scaled = self._by_scalar(j_scale, _SQRT_2_OVER_PI) if j_scale is not None else None
        j_inner = self._made(scaled[0], "Add") if scaled else None
        if j_inner is None:
            return None
        inner = self.chosen[j_inner]
        for k in (0, 1):
            x, x_info = inner.node.inputs[k], inner.ins[k]
            j_cubic = self._made(inner.node.inputs[1 - k], "Mul")
            cubic = self._by_scalar(j_cubic, _CUBIC) if j_cubic is not None else None
            cube = self._cube(cubic[0], x) if cubic else None
            if cube is None or x_info is None or x_info.dtype != _F32 or x_info.shape is None:
                continue
            tail = self._tail(pos, x)
            if tail is None:
                continue
            chain = cube + [j_cubic, j_inner, j_scale, pos] + tail
            if all(self.chosen[j].outs[0].shape == x_info.shape for j in chain):
                return x, x_info, tail[-1], chain
        return None

    def _tail(self, pos: int, x: str) -> list[int] | None:
        """After the Tanh: Add(t, 1), then Mul(Mul(x, that), 0.5) or Mul(Mul(x, 0.5), that)."""
        j_one = self._read(self.chosen[pos].node.outputs[0], "Add")
        if j_one is None or self._by_scalar(j_one, 1.0) is None:
            return None
        j_mul = self._read(self.chosen[j_one].node.outputs[0], "Mul")
        if j_mul is None:
            return None
        one_plus = self.chosen[j_one].node.outputs[0]
        inputs = self.chosen[j_mul].node.inputs
        other = inputs[1] if inputs[0] == one_plus else inputs[0]
        if other == x:
            j_half = self._read(self.chosen[j_mul].node.outputs[0], "Mul")
            half = self._by_scalar(j_half, 0.5) if j_half is not None else None
            return [j_one, j_mul, j_half] if half is not None else None
        j_half = self._made(other, "Mul")
        half = self._by_scalar(j_half, 0.5) if j_half is not None else None
        return [j_half, j_one, j_mul] if half is not None and half[0] == x else None
