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
    # Tensors of enclosing scopes read by this node's bodies (If, Loop, Scan):
    # the executor passes them after the explicit inputs, in this order.
    implicit_inputs: list[str] = field(default_factory=list)

    @property
    def all_inputs(self) -> list[str]:
        """Explicit inputs followed by implicit (outer-scope) inputs."""
        return self.inputs + self.implicit_inputs if self.implicit_inputs else self.inputs

    def input(self, i: int) -> str:
        """Name of input ``i``, or '' when absent."""
        return self.inputs[i] if i < len(self.inputs) else ""

    def has_input(self, i: int) -> bool:
        return bool(self.input(i))
