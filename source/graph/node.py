"""Nodes of the nnhal IR."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Node:
    """One operator application.

    ``inputs`` and ``outputs`` are tensor names; an empty string marks an
    optional input or output that is absent. ``opset`` is the model's opset
    for the node's domain; ``version`` is the operator version that opset
    selects (the highest ``since`` version not above it), set at import.
    ``attrs`` holds every attribute with its default filled in.
    """

    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""
    opset: int = 0
    version: int = 0

    def input(self, i: int) -> str:
        """Name of input ``i``, or '' when absent."""
        return self.inputs[i] if i < len(self.inputs) else ""

    def has_input(self, i: int) -> bool:
        return bool(self.input(i))
