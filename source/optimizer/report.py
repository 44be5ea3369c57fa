"""The placement report: per node the device and why earlier devices declined;
per subgraph its size, precision and boundary tensors with their bytes."""
from __future__ import annotations

from dataclasses import dataclass, field

from nnhal.graph.graph import Graph
from nnhal.graph.subgraph import Subgraph
from nnhal.optimizer.boundary import Boundary, boundaries
from nnhal.optimizer.placement import Decision


@dataclass
class SubgraphInfo:
    index: int
    device: str
    precision: str
    nodes: list[str]
    inputs: list[str]
    outputs: list[str]


@dataclass
class PlacementReport:
    decisions: list[Decision]
    subgraphs: list[SubgraphInfo]
    boundaries: list[Boundary]
    moved_by_min_group: list[str] = field(default_factory=list)
    min_group_size: int = 1
    events: list = field(default_factory=list)      # fallbacks recorded by the scheduler

    def by_device(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for d in self.decisions:
            counts[d.device] = counts.get(d.device, 0) + 1
        return counts

    def __str__(self) -> str:
        lines = [f"placement of {len(self.decisions)} nodes: "
                 + ", ".join(f"{dev} {n}" for dev, n in self.by_device().items())]
        if self.min_group_size > 1:
            lines.append(f"min_group_size={self.min_group_size} moved {len(self.moved_by_min_group)} node(s) to the fallback")
        lines.append("")
        lines.append(f"{'node':40s} {'op':22s} {'device':8s} reason / declined")
        for d in self.decisions:
            declined = "; ".join(f"{dev}: {why}" for dev, why in d.declined.items())
            lines.append(f"{d.node[:40]:40s} {d.op_type[:22]:22s} {d.device:8s} {d.reason}"
                         + (f" | declined by {declined}" if declined else ""))
        lines.append("")
        lines.append(f"{len(self.subgraphs)} subgraph(s):")
        for sg in self.subgraphs:
            lines.append(f"  #{sg.index} {sg.device} ({sg.precision}): {len(sg.nodes)} node(s) "
                         f"[{sg.nodes[0]} .. {sg.nodes[-1]}], {len(sg.inputs)} input(s), {len(sg.outputs)} output(s)")
        total = sum(b.nbytes or 0 for b in self.boundaries if b.producer != "graph input" and b.consumer != "graph output")
        lines.append("")
        lines.append(f"{len(self.boundaries)} boundary tensor(s); {total:,} bytes cross between subgraphs per run:")
        for b in self.boundaries:
            lines.append("  " + b.describe())
        for e in self.events:
            lines.append("fallback: " + e.describe())
        return "\n".join(lines)


def build_report(graph: Graph, decisions: dict[str, Decision], subgraphs: list[Subgraph],
                 moved: list[str] | None = None, min_group_size: int = 1, events: list | None = None) -> PlacementReport:
    return PlacementReport(
        [decisions[n.name] for n in graph.nodes if n.name in decisions],
        [SubgraphInfo(sg.index, sg.device, sg.precision, [n.name for n in (sg.original_nodes or sg.nodes)],
                      list(sg.inputs), list(sg.outputs)) for sg in subgraphs],
        boundaries(graph, subgraphs), list(moved or []), min_group_size, list(events or []))
