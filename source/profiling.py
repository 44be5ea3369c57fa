"""Where a run's time goes: per subgraph (any device) and per node (devices that time their nodes).

``nnhal.profile(graph, runs)`` runs a prepared graph ``runs`` times with timing switched on and
returns a Profile:

* every subgraph's wall time per run, from the scheduler (``Execution.timings``): what a device
  took, including its own scheduling, for any device;
* every node's time per run on devices that fill the optional ``Interface.profile`` hook, which
  switches their node timing on and off and returns ``NodeTiming`` records: the CPU times each kernel
  call of its plan, with the kernel implementation that ran it (after the CPU's fusions a fused node
  stands for its whole chain, a ``to-nhwc``/``to-nchw`` step is an inserted layout conversion).

``Profile.shares()`` accounts for every millisecond once: timed nodes by op and kernel, each
subgraph's time outside its timed nodes (a whole subgraph on a device that does not time nodes) and
the framework's own time (scheduler, API, outputs handed back to the host) as a row of its own; the shares sum to
100% of the wall time (of the summed subgraph time when async subgraphs overlapped).
``Profile.coverage()`` sums the same milliseconds by *kind of implementation* (``category``): tuned kernels,
"reference" implementations (a host reference kernel that loops or takes many passes where a tuned one
should run; a kernel named ``reference+...`` is one with something fused on and counts the same), layout
conversions (inserted ``to-nhwc``/``to-nchw`` steps), pure data movement (reshapes,
transposes, concats, slices, gathers, casts), control flow's own bookkeeping (If/Loop/Scan, their bodies'
steps counted as rows of their own), and the rest (untimed device time, the framework).
``Profile.table()`` renders it; ``nnhal profile MODEL`` prints it.
Timing adds about a microsecond per node; it is off unless asked for.
"""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nnhal.errors import DeviceError, wrapped


@dataclass(frozen=True)
class NodeTime:
    """One node (or fused node) of a device's compiled graph: milliseconds per run."""

    subgraph: int
    device: str
    node: str
    op: str
    kernel: str
    ms: float


@dataclass(frozen=True)
class SubgraphTime:
    """One subgraph: its device, node count and milliseconds per run (as the scheduler saw it)."""

    index: int
    device: str
    nodes: int
    ms: float


@dataclass(frozen=True)
class Share:
    """One row of the accounted time: where ``ms`` per run went, and its share of the whole."""

    kind: str          # "op" (timed nodes of one op and kernel), "subgraph" (a device timed as a whole),
                       # "device-other" (a subgraph's time outside its timed nodes), "framework"
    device: str
    label: str
    nodes: int
    ms: float
    share: float


FRAMEWORK = "framework"

# ------------------------------------------------------------------ coverage categories
KERNEL, REFERENCE, LAYOUT, MOVEMENT, CONTROL, OTHER = ("kernel", "reference", "layout", "data movement",
                                                        "control flow", "other")
CATEGORIES = (KERNEL, REFERENCE, LAYOUT, MOVEMENT, CONTROL, OTHER)
LAYOUT_KERNELS = frozenset({"to-nhwc", "to-nchw"})
MOVEMENT_OPS = frozenset({
    "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Concat", "Split", "Slice", "Gather",
    "GatherElements", "GatherND", "Pad", "Expand", "Tile", "DepthToSpace", "SpaceToDepth", "Shape", "Size",
    "ConstantOfShape", "Cast", "CastLike", "Dropout", "ScatterND", "ScatterElements", "Range", "Compress",
    "ReverseSequence", "Trilu", "CenterCropPad", "OneHot"})
CONTROL_OPS = frozenset({"If", "Loop", "Scan"})
# NOTE: ops whose kernel named "reference" is one BLAS call or one vectorised numpy pass per node (elementwise
# math, activations, comparisons, reductions, softmax, normalisations over the last axis): as fast as a tuned
# kernel would be on these sizes, so not counted as reference time. Every other op's "reference" kernel is
# (an unknown op counts as reference until it is listed here with a reason).
ONE_PASS_OPS = frozenset({
    "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Neg", "Abs", "Exp", "Log", "Erf",
    "Tanh", "Sigmoid", "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Clip", "HardSigmoid", "HardSwish",
    "Softplus", "Softsign", "Gelu", "Mish", "ThresholdedRelu", "Sin", "Cos", "Floor", "Ceil", "Round", "Sign",
    "Min", "Max", "Sum", "Mean", "Where", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not",
    "And", "Or", "Xor", "IsNaN", "IsInf", "Mod", "Softmax", "LogSoftmax", "ReduceMean", "ReduceSum", "ReduceMax",
    "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp", "ArgMax", "ArgMin",
    "LayerNormalization", "RMSNormalization", "BatchNormalization", "GlobalAveragePool", "GlobalMaxPool",
    "Swish", "Hardmax", "TopK", "CumSum"})


def category(op: str, kernel: str) -> str:
    """The kind of implementation that ran a timed node of ``op`` with ``kernel`` (see the module docstring)."""
    if kernel in LAYOUT_KERNELS:
        return LAYOUT
    if op in MOVEMENT_OPS:
        return MOVEMENT
    if op in CONTROL_OPS:
        return CONTROL
    if (kernel == "reference" or kernel.startswith("reference+")) and op not in ONE_PASS_OPS:
        return REFERENCE
    return KERNEL


@dataclass(frozen=True)
class Profile:
    runs: int
    wall_ms: float                        # per run, as the caller saw it
    subgraphs: list[SubgraphTime]
    nodes: list[NodeTime] = field(default_factory=list)
    stages: list[tuple[str, float]] = field(default_factory=list)   # (prepare stage, seconds) of the last prerun

    def by_op(self) -> list[tuple[str, str, str, int, float]]:
        """(device, op, kernel, node count, ms per run), slowest first."""
        acc: dict[tuple[str, str, str], list] = defaultdict(lambda: [0, 0.0])
        for n in self.nodes:
            a = acc[(n.device, n.op, n.kernel)]
            a[0] += 1
            a[1] += n.ms
        return sorted(((d, o, k, c, ms) for (d, o, k), (c, ms) in acc.items()), key=lambda r: -r[4])

    @property
    def framework_ms(self) -> float:
        """Per run, the time outside every subgraph: the scheduler, the API call, outputs handed back to
        the host (a subgraph's time includes the conversion of its inputs).

        0 when subgraphs overlapped (async devices): their summed time then exceeds the wall time."""
        return max(0.0, self.wall_ms - sum(s.ms for s in self.subgraphs))

    @property
    def accounted_ms(self) -> float:
        """The whole the shares divide: the wall time, or the summed subgraph time when they overlapped."""
        return max(self.wall_ms, sum(s.ms for s in self.subgraphs))

    def shares(self) -> list[Share]:
        """Every millisecond of a run, once: timed nodes by op and kernel, each subgraph's time outside its
        timed nodes (or all of it, on a device that does not time nodes) and the framework's own time.
        The shares sum to 1 (100%); slowest first, the framework last."""
        whole = self.accounted_ms
        rows = [Share("op", d, f"{o} ({k})", c, ms, 0.0) for d, o, k, c, ms in self.by_op()]
        timed: dict[int, float] = defaultdict(float)
        for n in self.nodes:
            timed[n.subgraph] += n.ms
        for s in self.subgraphs:
            if s.index in timed:
                rest = s.ms - timed[s.index]
                # NOTE: node timers and the subgraph timer read one clock; rounding can make rest < 0
                rows.append(Share("device-other", s.device, f"subgraph #{s.index} outside its nodes",
                                  0, rest, 0.0))
            else:
                rows.append(Share("subgraph", s.device, f"subgraph #{s.index} (device-timed as a whole)",
                                  s.nodes, s.ms, 0.0))
        rows.sort(key=lambda r: -r.ms)
        rows.append(Share(FRAMEWORK, "-", "scheduler, API, output hand-over: outside subgraphs", 0,
                          self.framework_ms, 0.0))
        return [Share(r.kind, r.device, r.label, r.nodes, r.ms, r.ms / whole if whole else 0.0) for r in rows]

    def coverage(self) -> dict[str, float]:
        """The share of the accounted time per ``category`` (every category present, summing to 1): timed
        nodes by the kind of implementation that ran them, everything else (untimed device time, the
        framework) as "other"."""
        whole = self.accounted_ms
        acc = dict.fromkeys(CATEGORIES, 0.0)
        for n in self.nodes:
            acc[category(n.op, n.kernel)] += n.ms
        acc[OTHER] = max(0.0, whole - sum(acc.values()))
        return {k: (v / whole if whole else 0.0) for k, v in acc.items()}

    def offenders(self) -> list[tuple[str, str, str, float]]:
        """(category, op, kernel, share of the accounted time) of every op and kernel outside the tuned
        kernels (reference, layout, data movement, control flow), largest first."""
        whole = self.accounted_ms
        rows = [(category(o, k), o, k, ms / whole if whole else 0.0) for _, o, k, _, ms in self.by_op()]
        return sorted((r for r in rows if r[0] != KERNEL), key=lambda r: -r[3])

    def table(self, top: int = 20) -> str:
        whole = self.accounted_ms
        lines = [f"profile over {self.runs} run(s): {self.wall_ms:.3f} ms per run"]
        lines.append("coverage: " + ", ".join(f"{k} {v:.1%}" for k, v in self.coverage().items()))
        if whole > self.wall_ms:
            lines.append(f"subgraphs overlapped (async devices): shares are of their summed {whole:.3f} ms")
        lines.append("")
        lines.append(f"{'subgraph':>9}  {'device':<10} {'nodes':>5}  {'ms/run':>9}  {'share':>6}")
        for s in self.subgraphs:
            share = s.ms / whole if whole else 0.0
            lines.append(f"{s.index:>9}  {s.device:<10} {s.nodes:>5}  {s.ms:>9.3f}  {share:>6.1%}")
        fw = self.framework_ms
        lines.append(f"{FRAMEWORK:>9}  {'-':<10} {'':>5}  {fw:>9.3f}  {fw / whole if whole else 0:>6.1%}")
        lines.append("")
        timed = sum(n.ms for n in self.nodes)
        lines.append(f"by op and kernel, every device and the framework (nodes timed: {timed:.3f} ms per run)")
        lines.append(f"{'device':<10} {'op (kernel) / where':<48} {'nodes':>5}  {'ms/run':>9}  {'share':>6}")
        for r in self.shares():
            lines.append(f"{r.device:<10} {r.label[:48]:<48} {r.nodes or '':>5}  {r.ms:>9.3f}  {r.share:>6.1%}")
        if self.nodes:
            lines.append("")
            lines.append(f"slowest {min(top, len(self.nodes))} nodes")
            lines.append(f"{'device':<10} {'node':<32} {'op':<22} {'kernel':<16} {'ms/run':>9}")
            for n in sorted(self.nodes, key=lambda n: -n.ms)[:top]:
                lines.append(f"{n.device:<10} {n.node[:32]:<32} {n.op:<22} {n.kernel:<16} {n.ms:>9.3f}")
        if self.stages:
            lines.append("")
            lines.append(f"prepare stages ({sum(t for _, t in self.stages) * 1e3:.1f} ms, once):")
            lines += [f"  {stage:<22} {seconds * 1e3:>9.1f} ms" for stage, seconds in self.stages]
        return "\n".join(lines) + "\n"


def measure(run: Callable[[], None], execution: Callable[[], Any], runs: int, warmup: int,
            stages: list[tuple[str, float]]) -> Profile:
    """``warmup`` + ``runs`` calls of ``run`` (one run of a prepared graph), the timed ones with the
    scheduler's subgraph timing and each device's ``profile`` hook switched on; ``execution`` returns the
    graph's prepared Execution (read again afterwards: a changed input shape prepares again)."""
    for _ in range(warmup):
        run()
    ex = execution()
    ex.timings = {}             # the scheduler adds every subgraph's wall time
    for sg in ex.subgraphs:
        _device_profile(ex, sg, True)
    timed: dict[int, list] = {}
    try:
        t0 = time.perf_counter()
        for _ in range(runs):
            run()
        wall = time.perf_counter() - t0
    finally:
        ex = execution()     # what actually ran
        seconds, ex.timings = ex.timings or {}, None
        for sg in ex.subgraphs:
            timed[sg.index] = _device_profile(ex, sg, False) or []
    subgraphs = [SubgraphTime(sg.index, sg.device, len(sg.nodes), seconds.get(sg.index, 0.0) / runs * 1e3)
                 for sg in ex.subgraphs]
    nodes = [NodeTime(sg.index, sg.device, t.node, t.op, t.kernel, t.seconds / runs * 1e3)
             for sg in ex.subgraphs for t in timed[sg.index]]
    return Profile(runs, wall / runs * 1e3, subgraphs, nodes, stages)


def _device_profile(ex: Any, sg: Any, enable: bool) -> list | None:
    """The device's optional ``profile`` hook on a prepared subgraph (None when it has none)."""
    device = ex.devices.get(sg.device)
    hook = device.interface.profile if device is not None else None
    if hook is None or sg.device_graph is None:
        return None
    with wrapped(lambda exc: DeviceError(f"device '{sg.device}': profile hook failed on subgraph #{sg.index}: "
                                         f"{type(exc).__name__}: {exc}")):
        return hook(device, sg, enable)
