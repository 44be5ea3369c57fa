"""Cast: convert the elements to the type of the 'to' attribute (floats truncate toward zero into integers)."""
from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

from nnhal.errors import ModelError, UnsupportedTypeError, where
from nnhal.graph.dtypes import to_numpy, type_name
from nnhal.graph.node import Node
from nnhal.operator.base import REQUIRED, Info, Prototype


class Cast(Prototype):
    op_type = "Cast"
    versions = (1, 6, 9, 13, 19, 21, 23, 24, 25, 28)
    attributes = {"to": REQUIRED}

    def attributes_for(self, version: int) -> dict[str, Any]:
        # NOTE: saturate and round_mode only affect float8 targets, which nnhal does not run.
        if version >= 24:
            return {"to": REQUIRED, "saturate": 1, "round_mode": "up"}
        if version >= 19:
            return {"to": REQUIRED, "saturate": 1}
        return self.attributes

    def check(self, node: Node) -> None:
        self.target(node)

    def target(self, node: Node) -> np.dtype:
        """The numpy dtype of the 'to' attribute (a type name in Cast-1, an enum value after)."""
        to = node.attrs["to"]
        if isinstance(to, str):
            try:
                to = TensorProto.DataType.Value(to.upper())
            except ValueError:
                raise ModelError(f"{where(node)}: 'to' names no ONNX element type: '{to}'") from None
        if not isinstance(to, int) or to not in TensorProto.DataType.values():
            raise ModelError(f"{where(node)}: 'to' is not an ONNX element type: {to!r}")
        name = type_name(to)
        dtype = to_numpy(to)
        if dtype is None:
            raise UnsupportedTypeError(f"{where(node)} casts to {name}, which nnhal does not support")
        return dtype

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        return [Info(self.target(node), ins[0].shape)]
