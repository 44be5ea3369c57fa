"""Subgraphs: the unit a device compiles and runs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.tensor import Quantization


@dataclass(frozen=True)
class Format:
    """How a device holds a boundary tensor: dtype and, for quantized ones, the parameters."""

    dtype: np.dtype
    quant: Quantization | None = None

    def describe(self) -> str:
        if self.quant is None:
            return str(self.dtype)
        scale, zp = float(np.ravel(self.quant.scale)[0]), int(np.ravel(self.quant.zero_point)[0])
        return f"{self.dtype}(scale={scale:.4g}, zp={zp})"


@dataclass
class Subgraph:
    """A group of nodes placed on one device.

    ``inputs`` and ``outputs`` name the tensors that cross the subgraph's
    boundary (graph inputs, constants excluded, and values exchanged with other
    subgraphs). ``values`` is the run's shared tensor store: the scheduler puts
    boundary inputs there before ``run`` and the device puts its outputs there.
    ``device_graph`` is whatever the device's ``pre_run`` built (its private
    compiled form); the core never looks inside. ``input_formats`` and
    ``output_formats`` say how the device wants a boundary tensor when that is
    not the host format (fp32 arrays): the core converts at the boundary
    (quantize, dequantize, cast), so no device handles another's formats.
    ``original_nodes`` keeps the nodes as placed, for a fallback to the CPU.
    ``allocation`` is the device allocator's own record for this subgraph: what ``allocate`` reserved,
    read back by ``release`` (per subgraph, so never keyed by id() in the device's privacy).
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
    input_formats: dict[str, Format] = field(default_factory=dict)
    output_formats: dict[str, Format] = field(default_factory=dict)
    original_nodes: list[Node] = field(default_factory=list)
    device_options: Any = None       # the device's typed options from the context (None = defaults)
    allocation: Any = None           # what the device's allocator.allocate reserved (its release frees it)
    keep_fp32: frozenset[str] = frozenset()   # nodes a quantizing pass must leave in float
    higher: frozenset[str] = frozenset()      # nodes computed in float whose outputs may still be quantized
    # Gemms whose activations may take per-token scales at run time -> output columns they compute in float
    dynamic: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # their block along K (0: whole rows), as the core resolved it from the devices' Description.dynamic_block;
    # None: the core's default (optimizer.quantize.BLOCK). NNHAL_DYNAMIC_BLOCK overrides either.
    dynamic_block: int | None = None

    def for_run(self, values: dict[str, np.ndarray]) -> "Subgraph":
        """A view of this subgraph for one run: every field shared but ``values``, the run's own store.

        Concurrent runs of one prepared graph each hand the device their own view, so a device reading
        and writing ``values`` never sees another run's tensors."""
        view = object.__new__(Subgraph)
        view.__dict__.update(self.__dict__)
        view.values = values
        return view

    def reset_to_fallback(self, device: str, graph: Graph | None) -> None:
        """Undo what placement on a failed device did, for a re-placement on ``device`` (the fallback):
        the device's options, compiled graph and boundary formats go, the nodes as placed and the
        un-rewritten graph (``graph``, when given) come back, precision returns to fp32."""
        self.device = device
        self.device_options = None
        self.device_graph = None
        self.allocation = None
        self.input_formats, self.output_formats = {}, {}
        if self.original_nodes:
            self.nodes = list(self.original_nodes)
        if graph is not None:
            self.graph = graph
        self.precision = "fp32"

    def __repr__(self) -> str:
        return f"Subgraph(#{self.index} on {self.device}, {len(self.nodes)} nodes)"
