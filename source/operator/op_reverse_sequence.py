"""ReverseSequence: reverse the first sequence_lens[b] steps of every batch entry along time."""
from __future__ import annotations

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype, same_as


class ReverseSequence(Prototype):
    op_type = "ReverseSequence"
    versions = (10, 28)
    inputs = (2, 2)
    attributes = {"batch_axis": 1, "time_axis": 0}

    def check(self, node: Node) -> None:
        axes = (node.attrs["batch_axis"], node.attrs["time_axis"])
        if sorted(axes) != [0, 1]:
            raise ModelError(f"{where(node)}: batch_axis and time_axis must be 0 and 1 in some order, got {axes}")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x, lens = ins
        if x.rank is not None and x.rank < 2:
            raise self.fail(node, f"input must have rank >= 2, it has rank {x.rank}")
        if lens.rank is not None and lens.rank != 1:
            raise self.fail(node, f"sequence_lens must be 1-D, it has rank {lens.rank}")
        if x.rank is not None and lens.rank == 1:
            batch = x.shape[node.attrs["batch_axis"]] if node.attrs["batch_axis"] in (0, 1) else None
            if batch is not None and lens.shape[0] is not None and lens.shape[0] != batch:
                raise self.fail(node, f"sequence_lens has {lens.shape[0]} values for a batch of {batch}")
        return [same_as(x)]
