"""Conformance reports: per-op pass rates, every non-passing case, where nodes ran (JSON or HTML)."""
from __future__ import annotations

import html
import json
from collections import Counter, defaultdict
from dataclasses import asdict
from pathlib import Path

from nnhal.conformance.runner import ERROR, PASS, UNSUPPORTED, WRONG, CaseResult

STATUSES = (PASS, WRONG, UNSUPPORTED, ERROR)


def per_op(results: list[CaseResult]) -> dict[str, Counter]:
    """Op type -> status counts over the cases that use it."""
    table: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        for op in r.ops:
            table[op][r.status] += 1
    return dict(sorted(table.items()))


def unsupported_ops(results: list[CaseResult]) -> list[str]:
    """Ops no case of which passes (every case using them is unsupported or fails)."""
    return [op for op, c in per_op(results).items() if c[PASS] == 0]


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
        raise ValueError(f"report '{path}': use a .json or .html file name")


def _html(data: dict) -> str:
    c = data["counts"]
    rows = []
    for op, counts in data["per_op"].items():
        total = sum(counts.values())
        rate = counts[PASS] / total if total else 0.0
        rows.append(f"<tr><td>{html.escape(op)}</td>" + "".join(f"<td>{counts[s]}</td>" for s in STATUSES)
                    + f"<td><div class='bar' style='width:{rate * 100:.0f}%'></div>{rate:.0%}</td></tr>")
    bad = [f"<tr><td>{html.escape(r['name'])}</td><td class='{r['status']}'>{r['status']}</td>"
           f"<td>{html.escape(r['reason'][:400])}</td></tr>" for r in data["cases"] if r["status"] != PASS]
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>nnhal conformance: {data['device']}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 6px}}
.bar{{display:inline-block;height:10px;background:#4a4;margin-right:4px}}.wrong{{color:#c00;font-weight:bold}}.error{{color:#a60}}</style>
</head><body><h1>nnhal conformance on device '{html.escape(data['device'])}' ({data['precision']})</h1>
<p>{data['total']} ONNX backend node cases: <b>{c[PASS]} pass</b>, {c[WRONG]} wrong, {c[UNSUPPORTED]} unsupported,
{c[ERROR]} error. Nodes per device: {html.escape(str(data['nodes_per_device']))}</p>
<h2>Per operator</h2><table><tr><th>op</th>{''.join(f'<th>{s}</th>' for s in STATUSES)}<th>pass rate</th></tr>
{''.join(rows)}</table><h2>Cases that did not pass</h2><table><tr><th>case</th><th>status</th><th>reason</th></tr>
{''.join(bad)}</table></body></html>"""
