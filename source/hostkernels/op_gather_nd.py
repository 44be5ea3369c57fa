"""GatherND on the CPU: index tuples flattened to row numbers, then one fancy-index gather."""
from __future__ import annotations

import math

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels._shape import wrap_indices
from nnhal.hostkernels.base import FunctionKernel


class GatherNDKernel(FunctionKernel):
    op_type = "GatherND"

    def compute(self, node: Node, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
        b = node.attrs.get("batch_dims", 0)
        k = indices.shape[-1]
        batch = math.prod(data.shape[:b])
        addressed = data.shape[b:b + k]
        rest = data.shape[b + k:]
        idx = indices.reshape(batch, -1, k)
        dims = np.array(addressed, dtype=np.int64)
        idx = wrap_indices(idx, dims)
        rows = np.ravel_multi_index(tuple(np.moveaxis(idx, -1, 0)), addressed) if k else \
            np.zeros(idx.shape[:2], dtype=np.int64)
        table = data.reshape(batch, math.prod(addressed), *rest)
        picked = table[np.arange(batch)[:, None], rows]
        return picked.reshape(indices.shape[:-1] + rest)


IMPLEMENTATIONS = (GatherNDKernel,)
