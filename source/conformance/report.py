"""Conformance reports: per-op pass rates, every non-passing case, where nodes ran (JSON or HTML)."""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import asdict
from pathlib import Path

from nnhal.conformance.results import ERROR, FALLBACK, PASS, UNSUPPORTED, WRONG, CaseResult
from nnhal.errors import OptionsError

STATUSES = (PASS, FALLBACK, WRONG, UNSUPPORTED, ERROR)


def per_op(results: list[CaseResult]) -> dict[str, Counter]:
    """Op type -> status counts over the cases that use it: the device's own coverage. In a case that passed
    on fallback, an op whose every node the device ran counts as its pass, the others as fallback."""
    table: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        for op in r.ops:
            table[op][PASS if r.status == FALLBACK and op not in r.fell_back else r.status] += 1
    return dict(sorted(table.items()))


def to_dict(results: list[CaseResult], device: str, precision: str) -> dict:
    counts = Counter(r.status for r in results)
    devices = Counter(d for r in results for d in r.placement.values())
    return {
        "device": device,
        "precision": precision,
        "total": len(results),
        "counts": {s: counts[s] for s in STATUSES},
        "nodes_per_device": dict(devices),
        "per_op": {op: {s: c[s] for s in STATUSES} for op, c in per_op(results).items()},
        "cases": [asdict(r) for r in results],
    }


def write(results: list[CaseResult], path: str, device: str, precision: str) -> None:
    data = to_dict(results, device, precision)
    out = Path(path)
    if out.suffix == ".json":
        out.write_text(json.dumps(data, indent=1))
    elif out.suffix in (".html", ".htm"):
        out.write_text(_html(data))
    else:
        raise OptionsError(f"report '{path}': use a .json or .html file name")


def _html(data: dict) -> str:
    from nnhal.ui.htmlpage import BAD, GOOD, NEUTRAL, WARN, Bar, Cell, Chart, Column, Table, page

    c = data["counts"]
    colors = {PASS: GOOD, FALLBACK: NEUTRAL, WRONG: BAD, UNSUPPORTED: NEUTRAL, ERROR: WARN}
    meaning = {PASS: "every output within the tolerance policy, computed by the device",
               FALLBACK: "passed on fallback: right outputs, but some node ran on the CPU (not the device's)",
               WRONG: "an output outside it (must stay at zero)",
               UNSUPPORTED: "an explicit, reasoned rejection", ERROR: "anything else (a crash)"}
    chart = Chart(f"{data['total']} cases by outcome", [Bar(s, c[s], colors[s], f"{c[s]}") for s in STATUSES])
    op_rows = []
    for op, counts in data["per_op"].items():
        total = sum(counts.values())
        rate = counts[PASS] / total if total else 0.0
        op_rows.append([op, *(counts[s] for s in STATUSES), Cell(f"{rate:.0%}", rate, "good" if rate == 1 else "")])
    per_op = Table("ops", "Per operator", [Column("op", help="ONNX operator type")]
                   + [Column(s, True, f"cases using the op: {meaning[s]}") for s in STATUSES]
                   + [Column("pass rate", True, "share of the op's cases that pass")], op_rows)
    bad = Table("cases", "Cases that did not pass",
                [Column("case", help="ONNX backend test case"), Column("status"),
                 Column("seconds", True, "time to import, prepare and run the case"),
                 Column("reason", help="why it did not pass")],
                [[r["name"], Cell(r["status"], r["status"], r["status"]), round(r["seconds"], 4), r["reason"][:400]]
                 for r in data["cases"] if r["status"] != PASS])
    nodes = ", ".join(f"{d}: {n}" for d, n in data["nodes_per_device"].items()) or "none"
    summary = (f"{data['total']} ONNX backend node cases: {c[PASS]} pass, {c[FALLBACK]} passed on fallback, "
               f"{c[WRONG]} wrong, "
               f"{c[UNSUPPORTED]} unsupported, {c[ERROR]} error. Nodes per device: {nodes}.")
    return page(f"nnhal conformance on device '{data['device']}' ({data['precision']})", summary, chart,
                [per_op, bad], [(colors[s], f"{s}: {meaning[s]}") for s in STATUSES])
