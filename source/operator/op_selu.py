"""Selu: y = gamma * x for x > 0, gamma * alpha * (e^x - 1) otherwise."""
from __future__ import annotations

from typing import Any

from nnhal.operator._unary import Unary


class Selu(Unary):
    op_type = "Selu"
    versions = (1, 6, 22)
    attributes = {"alpha": 1.6732631921768188, "gamma": 1.0507010221481323}

    def attributes_for(self, version: int) -> dict[str, Any]:
        # NOTE: Selu-1 had shorter default constants.
        if version < 6:
            return {"alpha": 1.673200011253357, "gamma": 1.0506999492645264}
        return self.attributes
