"""HTML renderings of the profile and accuracy reports (nnhal.cli.htmlpage pages)."""
from __future__ import annotations

from nnhal.cli.htmlpage import BAD, GOOD, NEUTRAL, PALETTE, WARN, Bar, Cell, Chart, Column, Table, page


def profile_html(prof, title: str) -> str:
    """Shares of every device, subgraph, op and the framework (nnhal.Profile), sortable, with a chart."""
    shares = prof.shares()
    devices = sorted({r.device for r in shares if r.device != "-"})
    color = {d: PALETTE[k % len(PALETTE)] for k, d in enumerate(devices)}
    color["-"] = NEUTRAL
    per_device: dict[str, float] = {}
    for r in shares:
        per_device[r.device] = per_device.get(r.device, 0.0) + r.share
    chart = Chart("share of a run per device (framework: scheduler, API, output hand-over)",
                  [Bar("framework" if d == "-" else d, v * 100, color[d], f"{v:.1%}") for d, v in per_device.items()])
    rows = [[r.device, r.kind, r.label, r.nodes or None, round(r.ms, 4), Cell(f"{r.share:.1%}", r.share)]
            for r in shares]
    table = Table("shares", "Where a run's time goes (shares sum to 100%)",
                  [Column("device", help="the device that spent the time; '-' is the framework"),
                   Column("kind", help="op: timed nodes of one op and kernel; subgraph: a device timed as a whole; "
                                       "device-other: a subgraph's time outside its timed nodes; framework: outside "
                                       "every subgraph"),
                   Column("what"), Column("nodes", True, "nodes in the row"),
                   Column("ms/run", True, "milliseconds per run"), Column("share", True, "share of a run")], rows)
    subgraphs = Table("subgraphs", "Subgraphs",
                      [Column("subgraph", True, "index in run order"), Column("device"), Column("nodes", True),
                       Column("ms/run", True)],
                      [[s.index, s.device, s.nodes, round(s.ms, 4)] for s in prof.subgraphs])
    nodes = Table("nodes", "Timed nodes",
                  [Column("device"), Column("node", help="node name (a fused node stands for its chain)"),
                   Column("op"), Column("kernel", help="the implementation that ran it"), Column("ms/run", True)],
                  [[n.device, n.node, n.op, n.kernel, round(n.ms, 4)] for n in sorted(prof.nodes, key=lambda n: -n.ms)])
    summary = f"{title}; {prof.runs} timed run(s), {prof.wall_ms:.3f} ms per run."
    return page("nnhal profile", summary, chart, [table, subgraphs, nodes],
                [(c, "framework" if d == "-" else d) for d, c in color.items()])


def accuracy_html(report) -> str:
    """Each precision against fp32 (nnhal.accuracy.AccuracyReport), sortable, with a chart of top-1 agreement."""
    rows, bars = [], []
    for r in [report.baseline, *report.results]:
        if not r.available:
            rows.append([r.precision, Cell("not available", None, "bad"), None, None, None, None, None, r.reason])
            bars.append(Bar(r.precision, 0.0, BAD, "not available"))
            continue
        top1 = r.top1_agreement
        rows.append([r.precision, r.ran_at, r.max_rel_error, r.mean_rel_error, Cell(f"{top1:.2%}", top1),
                     r.cosine, None if r.accuracy is None else Cell(f"{r.accuracy:.2%}", r.accuracy), ""])
        bars.append(Bar(r.precision, top1 * 100, GOOD if top1 >= 0.99 else WARN if top1 >= 0.9 else BAD, f"{top1:.2%}"))
    table = Table("precisions", "Precisions against fp32",
                  [Column("precision"), Column("ran at", help="devices and precisions the nodes ran at"),
                   Column("max rel err", True, "largest |y - fp32| / max|fp32| over the samples"),
                   Column("mean rel err", True, "mean of the same"),
                   Column("top-1 agree", True, "samples whose argmax equals fp32's"),
                   Column("cosine", True, "cosine similarity of the outputs to fp32's"),
                   Column("accuracy", True, "against the labels, when given"),
                   Column("reason", help="why a precision is not available")], rows)
    summary = (f"model {report.model} on {', '.join(report.devices)}, output {report.output}; "
               f"calibration: {report.calibration}; evaluation: {report.evaluation}.")
    return page("nnhal accuracy", summary, Chart("top-1 agreement with fp32 (%)", bars, [(100.0, "100%")]), [table],
                [(GOOD, "top-1 agreement >= 99%"), (WARN, ">= 90%"), (BAD, "below 90% or not available")])
