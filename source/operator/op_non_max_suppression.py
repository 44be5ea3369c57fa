"""NonMaxSuppression: greedy per-class box selection; int64 [N, 3] (batch, class, box) indices."""
from __future__ import annotations

import numpy as np

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype


class NonMaxSuppression(Prototype):
    op_type = "NonMaxSuppression"
    versions = (10, 11)
    inputs = (2, 5)
    attributes = {"center_point_box": 0}

    def check(self, node: Node) -> None:
        if node.attrs["center_point_box"] not in (0, 1):
            raise ModelError(f"{where(node)}: center_point_box must be 0 or 1, got {node.attrs['center_point_box']}")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        boxes, scores = ins[0], ins[1]
        if boxes.shape is not None and (len(boxes.shape) != 3 or boxes.shape[2] not in (4, None)):
            raise self.fail(node, f"boxes must be (batch, boxes, 4), got shape {boxes.shape}")
        if scores.shape is not None and len(scores.shape) != 3:
            raise self.fail(node, f"scores must be (batch, classes, boxes), got shape {scores.shape}")
        if boxes.shape is not None and scores.shape is not None:
            for a, b, what in ((boxes.shape[0], scores.shape[0], "batch"), (boxes.shape[1], scores.shape[2], "box")):
                if a is not None and b is not None and a != b:
                    raise self.fail(node, f"boxes {boxes.shape} and scores {scores.shape} differ in {what} size")
        return [Info(np.dtype(np.int64), (None, 3))]
