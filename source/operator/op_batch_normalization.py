"""BatchNormalization: per-channel affine normalization (inference, or training statistics from 14)."""
from __future__ import annotations

from typing import Any

from nnhal.errors import UnsupportedError, where
from nnhal.graph.node import Node
from nnhal.operator._nn import require_float
from nnhal.operator.base import REQUIRED, Info, Prototype, expect_shape


class BatchNormalization(Prototype):
    op_type = "BatchNormalization"
    versions = (1, 6, 7, 9, 14, 15)
    inputs = (5, 5)
    outputs = (1, 5)
    attributes = {"epsilon": 1e-5, "momentum": 0.9, "training_mode": 0}

    def attributes_for(self, version: int) -> dict[str, Any]:
        base = {"epsilon": 1e-5, "momentum": 0.9}
        if version == 1:
            return {**base, "consumed_inputs": REQUIRED, "is_test": 0, "spatial": 1}
        if version == 6:
            return {**base, "is_test": 0, "spatial": 1}
        if version == 7:
            return {**base, "spatial": 1}
        if version == 9:
            return base
        return self.attributes

    def check(self, node: Node) -> None:
        extra = [o for o in node.outputs[1:] if o]
        if node.version >= 14:
            if len(node.outputs) > 3:
                raise UnsupportedError(f"{where(node)}: BatchNormalization-{node.version} has at most 3 outputs")
            if extra and not node.attrs["training_mode"]:
                raise UnsupportedError(f"{where(node)}: running_mean/running_var outputs need training_mode=1")
        elif extra:
            raise UnsupportedError(f"{where(node)}: training outputs (mean, var, saved_mean, saved_var) of "
                                   f"BatchNormalization-{node.version} are not supported; nnhal runs inference only")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        require_float(self, node, x)
        if x.shape is not None and len(x.shape) < 2:
            raise self.fail(node, f"input rank {len(x.shape)} is below 2 (N, C, ...)")
        if x.shape is not None and (node.version >= 9 or node.attrs.get("spatial", 1)):
            for i, what in enumerate(("scale", "B", "input_mean", "input_var"), start=1):
                expect_shape(node, ins[i], (x.shape[1],), what)
        outs = [Info(x.dtype, x.shape)]
        for mean in ins[3:5][:len(node.outputs) - 1]:
            outs.append(Info(mean.dtype, mean.shape))
        return outs
