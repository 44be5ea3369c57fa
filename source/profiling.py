"""Where a run's time goes: per subgraph (any device) and per node (devices that time their nodes).

``nnhal.profile(graph, runs)`` runs a prepared graph ``runs`` times with timing switched on and
returns a Profile:

* every subgraph's wall time per run, from the scheduler (``Execution.timings``): what a device
  took, including its own scheduling, for any device;
* every node's time per run on devices that fill the optional ``Interface.profile`` hook, which
  switches their node timing on and off and returns ``NodeTiming`` records: the CPU times each kernel
  call of its plan, with the kernel implementation that ran it (after the CPU's fusions a fused node
  stands for its whole chain, a ``to-nhwc``/``to-nchw`` step is an inserted layout conversion).

``Profile.table()`` renders both plus a summary per op and kernel; ``nnhal profile MODEL`` prints it.
Timing adds about a microsecond per node; it is off unless asked for.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


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
class Profile:
    runs: int
    wall_ms: float                        # per run, as the caller saw it
    subgraphs: list[SubgraphTime]
    nodes: list[NodeTime] = field(default_factory=list)

    def by_op(self) -> list[tuple[str, str, str, int, float]]:
        """(device, op, kernel, node count, ms per run), slowest first."""
        acc: dict[tuple[str, str, str], list] = defaultdict(lambda: [0, 0.0])
        for n in self.nodes:
            a = acc[(n.device, n.op, n.kernel)]
            a[0] += 1
            a[1] += n.ms
        return sorted(((d, o, k, c, ms) for (d, o, k), (c, ms) in acc.items()), key=lambda r: -r[4])

    def table(self, top: int = 20) -> str:
        lines = [f"profile over {self.runs} run(s): {self.wall_ms:.3f} ms per run"]
        lines.append("")
        lines.append(f"{'subgraph':>8}  {'device':<10} {'nodes':>5}  {'ms/run':>9}  {'share':>6}")
        for s in self.subgraphs:
            share = s.ms / self.wall_ms if self.wall_ms else 0.0
            lines.append(f"{s.index:>8}  {s.device:<10} {s.nodes:>5}  {s.ms:>9.3f}  {share:>6.1%}")
        if self.nodes:
            timed = sum(n.ms for n in self.nodes)
            lines.append("")
            lines.append(f"by op and kernel (nodes timed: {timed:.3f} ms per run)")
            lines.append(f"{'device':<10} {'op':<22} {'kernel':<16} {'nodes':>5}  {'ms/run':>9}  {'share':>6}")
            for d, o, k, c, ms in self.by_op():
                lines.append(f"{d:<10} {o:<22} {k:<16} {c:>5}  {ms:>9.3f}  {ms / timed if timed else 0:>6.1%}")
            lines.append("")
            lines.append(f"slowest {min(top, len(self.nodes))} nodes")
            lines.append(f"{'device':<10} {'node':<32} {'op':<22} {'kernel':<16} {'ms/run':>9}")
            for n in sorted(self.nodes, key=lambda n: -n.ms)[:top]:
                lines.append(f"{n.device:<10} {n.node[:32]:<32} {n.op:<22} {n.kernel:<16} {n.ms:>9.3f}")
        return "\n".join(lines) + "\n"
