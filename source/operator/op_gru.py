"""GRU: gated recurrent unit (gates z, r, h), optionally linear before reset."""
from __future__ import annotations

from typing import Any

from nnhal.operator._qrc import RecurrentPrototype


class GRU(RecurrentPrototype):
    op_type = "GRU"
    versions = (1, 3, 7, 14, 22)
    inputs = (3, 6)
    outputs = (0, 2)
    gates = 3
    default_activations = ("Sigmoid", "Tanh")

    def attributes_for(self, version: int) -> dict[str, Any]:
        attrs = super().attributes_for(version)
        if version >= 3:
            attrs["linear_before_reset"] = 0
        return attrs
