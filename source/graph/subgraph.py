"""Subgraphs: the unit a device compiles and runs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nnhal.graph.graph import Graph
from nnhal.graph.node import Node


@dataclass
class Subgraph:
    """A group of nodes placed on one device.

    ``inputs`` and ``outputs`` name the tensors that cross the subgraph's
    boundary (graph inputs, constants excluded, and values exchanged with other
    subgraphs). ``values`` is the run's shared tensor store: the scheduler puts
    boundary inputs there before ``run`` and the device puts its outputs there.
    ``device_graph`` is whatever the device's ``pre_run`` built (its private
    compiled form); the core never looks inside.
    """

    index: int
    graph: Graph
    nodes: list[Node]
    inputs: list[str]
    outputs: list[str]
    device: str
    precision: str = "fp32"
    device_graph: Any = None
    values: dict[str, np.ndarray] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Subgraph(#{self.index} on {self.device}, {len(self.nodes)} nodes)"
