"""The placement report: per node the device and why earlier devices declined;
per subgraph its size, precision and boundary tensors with their bytes."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from nnhal.device.device import BoundaryMemory
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
    stages: list[tuple[str, float]] = field(default_factory=list)   # (prepare stage, seconds), in order

    def by_device(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for d in self.decisions:
            counts[d.device] = counts.get(d.device, 0) + 1
        return counts

    def __str__(self) -> str:
        lines = [f"placement of {len(self.decisions)} nodes: "
                 + ", ".join(f"{dev} {n}" for dev, n in self.by_device().items())]
        if self.min_group_size > 1:
            lines.append(f"min_group_size={self.min_group_size} moved {len(self.moved_by_min_group)} node(s) to "
                         "the fallback")
        lines.append("")
        lines += decision_table(self.decisions)
        lines.append("")
        lines.append(f"{len(self.subgraphs)} subgraph(s):")
        for sg in self.subgraphs:
            lines.append(f"  #{sg.index} {sg.device} ({sg.precision}): {len(sg.nodes)} node(s) "
                         f"[{sg.nodes[0]} .. {sg.nodes[-1]}], {len(sg.inputs)} input(s), {len(sg.outputs)} output(s)")
        total = sum(b.nbytes or 0 for b in self.boundaries
                    if b.producer != "graph input" and b.consumer != "graph output")
        lines.append("")
        copies = sum(b.copies for b in self.boundaries)
        copied = sum(b.copied_bytes or 0 for b in self.boundaries)
        lines.append(f"{len(self.boundaries)} boundary tensor(s); {total:,} bytes cross between subgraphs per run; "
                     f"{copies} copies, {copied:,} bytes copied per run (inputs and outputs included):")
        lines += ["  " + row for row in text_table(
            ("tensor", "from", "to", "format", "conversion", "transfer", "bytes"),
            [(b.tensor, b.producer, b.consumer, b.host or "?", b.conversion, b.transfer or "?",
              "?" if b.nbytes is None else f"{b.nbytes:,}") for b in self.boundaries])]
        for e in self.events:
            lines.append("fallback: " + e.describe())
        if self.stages:
            lines.append("")
            lines += stage_lines(self.stages)
        return "\n".join(lines)


def stage_lines(stages: list[tuple[str, float]]) -> list[str]:
    """The prepare stages (nnhal.pipeline) with their wall times, as a table headed by their sum."""
    total = sum(seconds for _, seconds in stages)
    return [f"prepare stages ({total * 1e3:.1f} ms):"] + ["  " + row for row in text_table(
        ("stage", "ms"), [(stage, f"{seconds * 1e3:.1f}") for stage, seconds in stages])]


def text_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """Rows of left-aligned columns (the last one unpadded), header first."""
    widths = [max(len(str(r[c])) for r in [header, *rows]) for c in range(len(header) - 1)]
    return ["  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)) + "  " + str(row[-1])
            for row in [header, *rows]]


def decision_table(decisions: list[Decision]) -> list[str]:
    """node, op, device and reason (with the devices that declined) per decision."""
    rows = []
    for d in decisions:
        declined = "; ".join(f"{dev}: {why}" for dev, why in d.declined.items())
        rows.append((d.node, d.op_type, d.device, d.reason + (f" | declined by {declined}" if declined else "")))
    return text_table(("node", "op", "device", "reason"), rows)


def actual_decisions(decisions: dict[str, Decision], subgraphs: list[Subgraph],
                     events: list | None = None) -> dict[str, Decision]:
    """The decisions as they ran: a node of a subgraph that fell back is on the device it fell back to,
    and its reason says what failed where (the scheduler's Fallback events)."""
    by_index = {sg.index: sg for sg in subgraphs}
    actual = dict(decisions)
    for e in events or []:
        sg = by_index.get(getattr(e, "subgraph", None))
        if sg is None:
            continue
        why = f"failed at {e.stage}: {e.error}"
        for node in sg.original_nodes or sg.nodes:
            d = actual.get(node.name)
            if d is not None and d.device != sg.device:
                actual[node.name] = replace(d, device=sg.device, reason=f"fell back from {e.device} ({why})",
                                            declined={**d.declined, e.device: why})
    return actual


def build_report(graph: Graph, decisions: dict[str, Decision], subgraphs: list[Subgraph],
                 moved: list[str] | None = None, min_group_size: int = 1,
                 events: list | None = None, stages: list[tuple[str, float]] | None = None) -> PlacementReport:
    """The report of a split; with the scheduler's fallback ``events``, nodes show where they really ran."""
    decisions = actual_decisions(decisions, subgraphs, events)
    return PlacementReport(
        [decisions[n.name] for n in graph.nodes if n.name in decisions],
        [SubgraphInfo(sg.index, sg.device, sg.precision, [n.name for n in (sg.original_nodes or sg.nodes)],
                      list(sg.inputs), list(sg.outputs)) for sg in subgraphs],
        boundaries(graph, subgraphs, _memory(subgraphs)), list(moved or []), min_group_size, list(events or []),
        list(stages or []))


def _memory(subgraphs: list[Subgraph]) -> dict[str, BoundaryMemory]:
    """Each registered device's BoundaryMemory declaration (a device gone since is left out: it copies)."""
    from nnhal.device.manager import registered_devices

    devices = {d.name: d for d in registered_devices()}
    return {sg.device: devices[sg.device].describe().memory for sg in subgraphs if sg.device in devices}
