"""The device record: a name and four tables of plain functions.

A device author fills these frozen dataclasses with module-level functions
and hands the Device to :func:`nnhal.device.manager.register_device`. Every
hook that is filled in is called by the core at the moment its name says.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from nnhal.operator.base import Info

if TYPE_CHECKING:
    from nnhal.graph.graph import Graph
    from nnhal.graph.node import Node
    from nnhal.graph.subgraph import Subgraph
    from nnhal.scheduler.scheduler import Scheduler

NAME_PATTERN = re.compile(r"^[a-z0-9]+$")
PRECISIONS = ("fp32", "fp16", "int8", "uint8")


@dataclass(frozen=True)
class Performance:
    """NNAPI-style capability figures for one precision: relative to the CPU at fp32 = 1.0."""

    exec_time: float = 1.0
    power_usage: float = 1.0


@dataclass(frozen=True)
class Description:
    """What a device supports, statically: op types, precisions, options, performance.

    ``compute`` says, per precision, how the device really stores and computes
    it when that is not what the name implies (e.g. the CPU's fp16:
    "float16 storage, float32 compute"); a precision absent from it is
    computed as named.
    """

    ops: frozenset[str]
    precisions: tuple[str, ...] = ("fp32",)
    performance: dict[str, Performance] = field(default_factory=dict)
    options: type | None = None      # a dataclass of the device's typed options
    summary: str = ""
    compute: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """Whether a device can run one node, and why not."""

    ok: bool
    reason: str = ""

    @staticmethod
    def yes() -> "Verdict":
        return Verdict(True, "")

    @staticmethod
    def no(reason: str) -> "Verdict":
        return Verdict(False, reason)


@dataclass(frozen=True)
class Candidate:
    """A node offered to a device's ``evaluation``, with what inference knows about it."""

    node: "Node"
    inputs: list[Info | None]
    outputs: list[Info]
    precision: str


@dataclass(frozen=True)
class Interface:
    """How the core drives the device. Only ``run`` is required.

    init(device)                                   at registration
    pre_run(device, subgraph, options)             compile, pack weights; store the result in subgraph.device_graph
    run(device, subgraph)                          synchronous execution: read inputs from subgraph.values, write outputs there
    post_run(device, subgraph)                     clear run state; pre_run may follow (new shapes)
    async_run(device, subgraph)                    start a run and return at once
    async_wait(device, subgraph, try_wait) -> bool  True when the started run is done; try_wait=True must not block
    release_graph(device, device_graph)            free what pre_run built
    release_device(device)                         at unregistration
    """

    run: Callable[["Device", "Subgraph"], None]
    init: Callable[["Device"], None] | None = None
    pre_run: Callable[["Device", "Subgraph", Any], None] | None = None
    post_run: Callable[["Device", "Subgraph"], None] | None = None
    async_run: Callable[["Device", "Subgraph"], None] | None = None
    async_wait: Callable[["Device", "Subgraph", bool], bool] | None = None
    release_graph: Callable[["Device", Any], None] | None = None
    release_device: Callable[["Device"], None] | None = None


@dataclass(frozen=True)
class Allocator:
    """What the device can run and where its tensors live.

    describe(device) -> Description               static: ops, precisions, options, performance
    evaluation(device, candidate) -> Verdict      can it run *this* node (attributes, shapes, dtypes)? why not?
    allocate(device, subgraph)                    device memory for the subgraph's tensors (before pre_run)
    release(device, subgraph)                     free it (after post_run)
    """

    describe: Callable[["Device"], Description]
    evaluation: Callable[["Device", Candidate], Verdict] | None = None
    allocate: Callable[["Device", "Subgraph"], None] | None = None
    release: Callable[["Device", "Subgraph"], None] | None = None


@dataclass(frozen=True)
class Optimizer:
    """Graph hooks.

    split_graph(graph, placement) -> list[Subgraph]   replaces the default split; None = default
    optimize_graph(subgraph, precision) -> Subgraph   rewrite a subgraph to the precision the device wants
    """

    split_graph: Callable[["Graph", dict[str, str]], list["Subgraph"]] | None = None
    optimize_graph: Callable[["Subgraph", str], "Subgraph"] | None = None


@dataclass
class Device:
    """A registered device. ``privacy`` is the device's own state; the core never reads it."""

    name: str
    interface: Interface
    allocator: Allocator | None = None
    optimizer: Optimizer | None = None
    scheduler: "Scheduler | None" = None
    privacy: object = None

    def describe(self) -> Description:
        if self.allocator is None:
            return Description(frozenset())
        return self.allocator.describe(self)
