"""Transpose: permute the axes (reversed by default)."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype


def permutation(node: Node, rank: int) -> list[int]:
    """The node's perm attribute, or the reversed axes; ValueError when not a permutation."""
    perm = node.attrs["perm"]
    if perm is None:
        return list(range(rank))[::-1]
    perm = [p + rank if p < 0 else p for p in perm]
    if sorted(perm) != list(range(rank)):
        raise ValueError(f"perm {node.attrs['perm']} is not a permutation of {rank} axes")
    return perm


class Transpose(Prototype):
    op_type = "Transpose"
    versions = (1, 13, 21, 23, 24, 25)
    attributes = {"perm": None}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if x.shape is None:
            rank = None if node.attrs["perm"] is None else len(node.attrs["perm"])
            return [Info(x.dtype, None if rank is None else (None,) * rank)]
        try:
            perm = permutation(node, len(x.shape))
        except ValueError as exc:
            raise self.fail(node, str(exc)) from exc
        return [Info(x.dtype, tuple(x.shape[p] for p in perm))]
