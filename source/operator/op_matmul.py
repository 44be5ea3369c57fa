"""MatMul: numpy matmul semantics (batch broadcasting, 1-D operands promoted then squeezed)."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype, broadcast


def matmul_shape(proto: Prototype, node: Node, a: tuple | None, b: tuple | None) -> tuple | None:
    """Output shape of numpy matmul, None when unknown."""
    if a is None or b is None:
        return None
    if len(a) == 0 or len(b) == 0:
        raise proto.fail(node, "matmul operands must have rank >= 1")
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    if a2[-1] is not None and b2[-2] is not None and a2[-1] != b2[-2]:
        raise proto.fail(node, f"inner dimensions differ: {tuple(a)} @ {tuple(b)}")
    batch = broadcast(node, a2[:-2], b2[:-2])
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


class MatMul(Prototype):
    op_type = "MatMul"
    versions = (1, 9, 13)
    inputs = (2, 2)

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        a, b = ins
        if a.dtype != b.dtype:
            raise self.fail(node, f"inputs have different dtypes {a.dtype} and {b.dtype}")
        return [Info(a.dtype, matmul_shape(self, node, a.shape, b.shape))]
