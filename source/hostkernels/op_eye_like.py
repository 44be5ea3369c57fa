"""EyeLike on the CPU: numpy eye."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels.base import FunctionKernel
from nnhal.operator.op_eye_like import eye_dtype


class EyeLikeKernel(FunctionKernel):
    op_type = "EyeLike"

    def compute(self, node: Node, x: np.ndarray) -> np.ndarray:
        n, m = x.shape
        return np.eye(n, m, k=node.attrs["k"], dtype=eye_dtype(node, x.dtype))


IMPLEMENTATIONS = (EyeLikeKernel,)
