"""Pow: elementwise base ** exponent with multidirectional broadcasting; the result has the base's dtype."""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator._binary import NUMERIC, Binary, check_kind
from nnhal.operator.base import Info


class Pow(Binary):
    op_type = "Pow"
    versions = (7, 12, 13, 15)

    def result_dtype(self, node: Node, a: Info, b: Info) -> np.dtype | None:
        if node.version < 12:
            return super().result_dtype(node, a, b)
        check_kind(node, self, a.dtype, NUMERIC)
        check_kind(node, self, b.dtype, NUMERIC)
        return a.dtype
