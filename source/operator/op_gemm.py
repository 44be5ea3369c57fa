"""Gemm: Y = alpha * A' B' + beta * C with optional transposes and broadcast C."""
from __future__ import annotations

from typing import Any

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype, broadcast


class Gemm(Prototype):
    op_type = "Gemm"
    versions = (1, 6, 7, 9, 11, 13)
    inputs = (2, 3)
    attributes = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}

    def attributes_for(self, version: int) -> dict[str, Any]:
        if version < 7:
            return {**self.attributes, "broadcast": 0}
        return self.attributes

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        a, b = ins[0], ins[1]
        c = ins[2] if len(ins) > 2 else None
        if node.version < 11 and c is None:
            raise self.fail(node, f"Gemm-{node.version} requires input C")
        if a.dtype != b.dtype:
            raise self.fail(node, f"A and B have different dtypes {a.dtype} and {b.dtype}")
        for name, info in (("A", a), ("B", b)):
            if info.shape is not None and len(info.shape) != 2:
                raise self.fail(node, f"{name} has rank {len(info.shape)}; Gemm takes matrices")
        m = None if a.shape is None else a.shape[1 if node.attrs["transA"] else 0]
        ka = None if a.shape is None else a.shape[0 if node.attrs["transA"] else 1]
        kb = None if b.shape is None else b.shape[1 if node.attrs["transB"] else 0]
        n = None if b.shape is None else b.shape[0 if node.attrs["transB"] else 1]
        if ka is not None and kb is not None and ka != kb:
            raise self.fail(node, f"inner dimensions differ: A' is (M, {ka}), B' is ({kb}, N)")
        out = (m, n)
        if c is not None and c.shape is not None:
            if len(c.shape) > 2:
                raise self.fail(node, f"C has rank {len(c.shape)}; it must broadcast to (M, N)")
            full = broadcast(node, out, c.shape)
            if full is not None and any(x is not None and y is not None and x != y for x, y in zip(full, out)):
                raise self.fail(node, f"C of shape {c.shape} does not broadcast to (M, N) = {out}")
        return [Info(a.dtype, out)]
