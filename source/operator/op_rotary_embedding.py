"""RotaryEmbedding: rotate (halves or interleaved pairs of) each head by per-position cos/sin."""
from __future__ import annotations

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype, same_as


class RotaryEmbedding(Prototype):
    op_type = "RotaryEmbedding"
    versions = (23,)
    inputs = (3, 4)
    attributes = {"interleaved": 0, "num_heads": 0, "rotary_embedding_dim": 0}

    def check(self, node: Node) -> None:
        if node.attrs["num_heads"] < 0 or node.attrs["rotary_embedding_dim"] < 0:
            raise ModelError(f"{where(node)}: num_heads and rotary_embedding_dim must be >= 0")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if x.shape is None:
            return [same_as(x)]
        if len(x.shape) not in (3, 4):
            raise self.fail(node, f"X must be 3-D or 4-D, got shape {x.shape}")
        heads = node.attrs["num_heads"]
        if len(x.shape) == 3:
            if heads < 1:
                raise self.fail(node, "num_heads must be given for a 3-D input")
            if x.shape[2] is not None and x.shape[2] % heads:
                raise self.fail(node, f"hidden size {x.shape[2]} is not a multiple of num_heads {heads}")
        return [same_as(x)]
