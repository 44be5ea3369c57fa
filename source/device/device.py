"""The device record: a name and four tables of plain functions.

A device author fills these frozen dataclasses with module-level functions
and hands the Device to :func:`nnhal.device.manager.register_device` (an
in-tree device from its ``register_<name>_device()``; an out-of-tree one
returns it from ``create_device()``, see :mod:`nnhal.device.discovery`).
Every hook that is filled in is called by the core at the moment its name
says; the rules each hook must follow are in the docstring of its table.
Only ``Interface.run`` and ``Allocator.describe`` are required.
docs/device-guide.md walks through a whole device; ``nnhal.testing`` checks one.
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

# The version of this device contract (the records below and the rules in their docstrings). An
# out-of-tree device declares the version it was written against as a module-level
# ``NNHAL_DEVICE_API = (major, minor)``; the core accepts the same major and a minor <= its own
# (a minor adds optional fields or hooks, a major changes what existing ones mean).
# 1.1: the optional Interface.profile hook (NodeTiming records); placement reads Description.performance
# under Options(prefer="speed" | "power").
# 1.2: the optional Optimizer.compile_graph hook (the optimizer's fp32 runs of host-kernel graphs).
API_VERSION: tuple[int, int] = (1, 2)
PRECISIONS = ("fp32", "fp16", "int8", "uint8")
# The device API version that added each optional hook ("table.hook") or Description field after 1.0: a
# device declaring an older version that fills one was written against a newer contract than it says
# (register_device warns; nnhal.testing.check_api_version fails).
SINCE: dict[str, tuple[int, int]] = {"interface.profile": (1, 1), "description.performance": (1, 1),
                                     "optimizer.compile_graph": (1, 2)}


def newer_than_declared(device: "Device", api: tuple[int, int]) -> list[str]:
    """The hooks and Description fields ``device`` fills that its declared ``api`` version does not have."""
    filled = {f"interface.{name}" for name in ("profile",) if getattr(device.interface, name, None) is not None}
    if getattr(device.optimizer, "compile_graph", None) is not None:
        filled.add("optimizer.compile_graph")
    try:
        if device.describe().performance:
            filled.add("description.performance")
    except Exception:  # NOTE: a describe that raises is refused at registration with its own message
        pass
    return sorted(f"{what} (since {since[0]}.{since[1]})" for what, since in SINCE.items()
                  if what in filled and tuple(api) < since)


@dataclass(frozen=True)
class Performance:
    """NNAPI-style capability figures for one precision: relative to the CPU at fp32 = 1.0 (lower is
    better). Placement reads them under ``Options(prefer="speed")`` (exec_time) or ``"power"``
    (power_usage); a precision the device gives no figures for counts as 1.0."""

    exec_time: float = 1.0
    power_usage: float = 1.0


HOST_TRANSFERS = ("copy", "shared")


@dataclass(frozen=True)
class BoundaryMemory:
    """How a device's memory meets the host at a subgraph boundary (``Description.memory``), so the core can
    count the copies a split costs. The default is a device with memory of its own (every crossing a copy).

    ``host_inputs``: "copy" when the device copies a host array into its own memory before a run; "shared"
    when it reads the host array where it is (a CPU runtime binding numpy memory, a GPU with unified memory
    importing it). ``host_outputs``: "copy" when results are copied out into host arrays; "shared" when the
    device writes them straight into host arrays (fresh ones each run: the arrays a user receives are never
    written again). ``device_resident``: a tensor passed between two adjacent subgraphs on this device stays
    in device memory (no host round trip); the device then keeps it in what its ``allocate`` hook planned
    and reads it back by name. A declaration only describes: the device's hooks do what it says.
    """

    host_inputs: str = "copy"
    host_outputs: str = "copy"
    device_resident: bool = False

    def __post_init__(self) -> None:
        for name in ("host_inputs", "host_outputs"):
            if getattr(self, name) not in HOST_TRANSFERS:
                raise ValueError(f"BoundaryMemory.{name} must be one of {HOST_TRANSFERS}, got {getattr(self, name)!r}")


# A device whose memory is the host's (the numpy CPU device): nothing is copied at its boundaries.
HOST_MEMORY = BoundaryMemory(host_inputs="shared", host_outputs="shared", device_resident=True)


@dataclass(frozen=True)
class Description:
    """What a device supports, statically: op types, precisions, options, performance (per precision,
    used by placement when the user prefers speed or power over the priority order).

    ``reentrant`` says whether ``run`` / ``async_run`` may be entered by several runs of prepared
    graphs at once (a Session shared by threads). Each run gets its own view of the subgraph whose
    ``values`` are private to it; a reentrant device keeps every other per-run state out of shared
    objects (``device_graph``, ``privacy``). A device that does not declare it (the default, False)
    is entered by one run at a time: the core serialises calls to that device alone.

    ``reuses_outputs`` says whether the arrays ``run`` puts into ``subgraph.values`` may be written again
    by a later run (a pool of output buffers, mapped staging memory). The default, False, promises fresh
    arrays per run, which the core passes on as they are; with True the core copies each output as it
    leaves the subgraph. Either way an array a user receives is never changed by a later run
    (docs/device-guide.md, "Who owns the outputs"; ``nnhal.testing.check_output_ownership`` checks it).

    ``activation_quantization`` says how the device can quantize activations
    under int8/uint8: "static" (the per-tensor scales the core calibrated) and,
    when listed, "dynamic" (each row / token quantized with its own scale at
    run time, from the float activation). The core marks the token matrix
    products of transformers dynamic; a device without "dynamic" runs them
    with static scales, or declines the nodes that require dynamic scales.

    ``dynamic_block`` says how a device with "dynamic" scales its rows: 0 one scale per whole row (per
    token, what integer GEMM kernels sum over), n > 0 one per row and n columns along K; None (the
    default) the core's choice (``optimizer.quantize.BLOCK``). The core measures smoothing and the mixed
    search's sensitivities under it, and the device's ``optimize_graph`` lowers with it;
    NNHAL_DYNAMIC_BLOCK overrides it for every device.

    ``compute`` says, per precision, how the device really stores and computes
    it when that is not what the name implies (e.g. the CPU's fp16:
    "float16 storage, float32 compute"); a precision absent from it is
    computed as named.

    ``float_in_quantized`` says the device computes, inside a subgraph it runs quantized, the nodes the
    core keeps in float32 under int8/uint8 (normalizations, softmax, residual adds: Options.keep_fp32 and the
    core's own choices). False (the default, an integer-only chip): only the fallback device takes them.

    ``memory`` says whether boundary tensors are copied or shared with the host (BoundaryMemory); the
    placement report counts copies and copied bytes per boundary from it.
    """

    ops: frozenset[str]
    precisions: tuple[str, ...] = ("fp32",)
    performance: dict[str, Performance] = field(default_factory=dict)
    options: type | None = None      # a dataclass of the device's typed options
    summary: str = ""
    compute: dict[str, str] = field(default_factory=dict)
    reentrant: bool = False
    reuses_outputs: bool = False
    activation_quantization: tuple[str, ...] = ("static",)
    dynamic_block: int | None = None
    memory: BoundaryMemory = field(default_factory=BoundaryMemory)
    float_in_quantized: bool = False


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
    """How the core drives the device. Only ``run`` is required; async_run and async_wait come together.

    init(device)
        Once, at registration, before any other hook. Open the driver and put the
        device's own state in ``device.privacy``. Raising refuses the registration
        (the device is then unavailable, with the message as the reason).
    pre_run(device, subgraph, options)
        Once per prepared subgraph (again after post_run, for new shapes). Compile,
        pack weights, plan buffers, and store the result in
        ``subgraph.device_graph`` (the core never looks inside). ``options`` is the
        nnhal.Options; ``subgraph.device_options`` the device's typed options.
        Raising re-places the subgraph on the CPU (an error under strict).
    run(device, subgraph)
        Synchronous execution. ``subgraph`` is a per-run view: its ``values`` are
        this run's own, everything else is shared by concurrent runs of the
        prepared graph and must not be mutated (per-run state in ``device_graph``
        or ``privacy`` needs ``Description.reentrant=False``, the default). Read
        the boundary inputs from ``subgraph.values`` and constants from
        ``subgraph.graph.tensors[name].value``; write every name of
        ``subgraph.outputs`` into ``subgraph.values`` and nothing else (keep
        intermediates local), each a fresh array (or declare
        ``Description.reuses_outputs``) of the dtype and shape inference gave it
        (``subgraph.graph.tensors[name]``, or the format in ``output_formats``);
        a missing or misshapen output is a DeviceError naming the tensor. Raising,
        or such an output, re-places the subgraph on the CPU (an error under strict).
    async_run(device, subgraph)
        Start what ``run`` does and return at once; used only when another
        subgraph can overlap. Same rules on ``values`` as ``run``.
    async_wait(device, subgraph, try_wait) -> bool
        True when the run started by async_run has finished and its outputs are in
        ``subgraph.values``. With ``try_wait=True`` it must not block.
    post_run(device, subgraph)
        After the last run of a preparation: drop run state. pre_run may follow.
    release_graph(device, device_graph)
        Free what pre_run built (also after a failure, before the CPU takes over).
    release_device(device)
        Once, at unregistration (nnhal.release()), after everything else: undo init.
    profile(device, subgraph, enable) -> list[NodeTiming] | None
        Optional per-node timing for ``nnhal.profile``, called on the prepared subgraph with no run in
        flight (the core holds the graph exclusively meanwhile). ``enable=True``: start timing the
        subgraph's nodes from zero; return None. ``enable=False``: stop, and return one NodeTiming per
        node (or fused node) timed since, seconds summed over the runs in between. Absent: the profile
        still gets the subgraph's wall time per run from the scheduler, only no per-node breakdown.
    """

    run: Callable[["Device", "Subgraph"], None]
    init: Callable[["Device"], None] | None = None
    pre_run: Callable[["Device", "Subgraph", Any], None] | None = None
    post_run: Callable[["Device", "Subgraph"], None] | None = None
    async_run: Callable[["Device", "Subgraph"], None] | None = None
    async_wait: Callable[["Device", "Subgraph", bool], bool] | None = None
    release_graph: Callable[["Device", Any], None] | None = None
    release_device: Callable[["Device"], None] | None = None
    profile: Callable[["Device", "Subgraph", bool], "list[NodeTiming] | None"] | None = None


@dataclass(frozen=True)
class NodeTiming:
    """One node (or fused node) of a device's compiled subgraph, as its ``profile`` hook reports it."""

    node: str           # the node's name (a fused node stands for its whole chain)
    op: str             # its op type
    kernel: str         # the implementation that ran it ("" when the device has one per op)
    seconds: float      # summed over every run since profiling was switched on


@dataclass(frozen=True)
class Allocator:
    """What the device can run and where its tensors live. ``describe`` is required.

    describe(device) -> Description
        Static and cheap (called at registration and at every placement): the op
        types and precisions the device takes, its options dataclass, a summary.
        A node whose op or precision is not described never reaches the device.
    evaluation(device, candidate) -> Verdict
        Can it run *this* node (a Candidate: the Node with attrs, inputs' and
        outputs' Info with dtype, shape and constant value, the precision)? Return
        Verdict.no(reason) to decline; the reason is shown in the placement report.
        Absent: every node of a described op and precision is accepted, whatever
        its dtypes, shapes or attributes.
    allocate(device, subgraph)
        Device memory for the subgraph's tensors, before pre_run. Keep the record of what
        was reserved in ``subgraph.allocation`` (per subgraph; pre_run and release read it).
    release(device, subgraph)
        Free it, after post_run (also after a failure, before the CPU takes over).
    """

    describe: Callable[["Device"], Description]
    evaluation: Callable[["Device", Candidate], Verdict] | None = None
    allocate: Callable[["Device", "Subgraph"], None] | None = None
    release: Callable[["Device", "Subgraph"], None] | None = None


@dataclass(frozen=True)
class Optimizer:
    """Graph hooks; both optional.

    split_graph(graph, placement) -> list[Subgraph]
        Replace the default split (maximal acyclic same-device groups). Only tag
        and group: every node in exactly one subgraph, on the device the placement
        gave it, boundary tensors declared on both sides, no cycle between
        subgraphs. The core checks this and raises DeviceError naming the device.
    optimize_graph(subgraph, precision) -> Subgraph
        Rewrite a subgraph to the precision the device runs (fp16, int8, uint8),
        setting ``input_formats`` / ``output_formats`` for boundary tensors it wants
        in another format (the core converts at the boundary). Return the subgraph;
        raising re-places it on the CPU.
    compile_graph(graph, nodes, inputs, outputs) -> Runnable
        Optional (API 1.2), for a device that runs host-kernel graphs on host memory better than the
        plain interpreter of host kernels: compile ``nodes`` of ``graph`` into an object whose
        ``run(values)`` reads ``inputs`` from the dict ``values`` and writes ``outputs`` (every name
        asked for, intermediates included) into it, with the host kernels' results. The optimizer's fp32
        runs (calibration, mixed-precision sensitivities) use the first registered device's
        (``nnhal.device.manager.graph_compiler``); the cpu device passes its plan.
    """

    split_graph: Callable[["Graph", dict[str, str]], list["Subgraph"]] | None = None
    optimize_graph: Callable[["Subgraph", str], "Subgraph"] | None = None
    compile_graph: Callable[["Graph", list["Node"], list[str], list[str]], Any] | None = None


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
