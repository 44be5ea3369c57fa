"""EyeLike: a 2-D tensor like the input with ones on the k-th diagonal."""
from __future__ import annotations

import numpy as np

from nnhal.errors import UnsupportedTypeError, where
from nnhal.graph.dtypes import to_numpy, type_name
from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype


def eye_dtype(node: Node, input_dtype: np.dtype | None) -> np.dtype | None:
    """The output dtype: the dtype attribute, else the input's."""
    code = node.attrs["dtype"]
    if code is None:
        return input_dtype
    dtype = to_numpy(code)
    if dtype is None:
        raise UnsupportedTypeError(f"{where(node)}: dtype {type_name(code)} is not supported")
    return dtype


class EyeLike(Prototype):
    op_type = "EyeLike"
    versions = (9, 22)
    attributes = {"dtype": None, "k": 0}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if x.rank is not None and x.rank != 2:
            raise self.fail(node, f"input must have rank 2, it has rank {x.rank}")
        return [Info(eye_dtype(node, x.dtype), x.shape if x.shape is not None else (None, None))]
