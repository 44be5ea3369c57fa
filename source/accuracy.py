"""Accuracy of reduced precisions against fp32 on the same inputs.

    from nnhal.accuracy import compare_precisions, format_report
    report = compare_precisions("model.onnx", feeds_list, precisions=("fp16", "int8"), labels=y)
    print(format_report(report))

``feeds_list`` is a list of feeds (dicts input name -> array, batch first).
With two or more feeds, the first half calibrates the quantized precisions
(``nnhal.calibrate``) and every precision, fp32 included, is measured on the
rest; with one feed, it does both. Each precision runs as
``nnhal.Session(model, devices=..., precision=p, calibration=ranges)``; a
precision nnhal (or the devices) cannot run is reported as not available,
with the reason, instead of failing the whole report.

Metrics, per precision against fp32 over the evaluation feeds (output
``output``, the first by default), with y the precision's and r fp32's values:

max_rel_error   max|y - r| / max|r|    (relative to the output's range)
mean_rel_error  mean|y - r| / mean|r|
top1_agreement  share of samples whose argmax (over all non-batch dims) agrees
cosine          cosine similarity of y and r, flattened
accuracy        share of samples whose argmax equals the label (labels given)

For int8, uint8 and mixed the report also lists the worst nodes: the
weighted nodes whose quantization alone (on fp32 inputs, carried through the
rest of the graph in fp32) causes the largest relative output error
(``optimizer/mixed.py``'s sensitivities; for mixed, what its search measured,
with the precision it chose for each).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nnhal.device.manager import FALLBACK_DEVICE
from nnhal.errors import InputError, NnhalError

QUANTIZED = ("int8", "uint8", "mixed")


@dataclass
class PrecisionResult:
    """One row of the report."""

    precision: str
    available: bool = True
    reason: str = ""
    ran_at: str = ""                 # what the subgraphs ran at, e.g. "cpu:fp32" or "vnpu:int8, cpu:fp32"
    max_rel_error: float = float("nan")
    mean_rel_error: float = float("nan")
    top1_agreement: float = float("nan")
    cosine: float = float("nan")
    accuracy: float | None = None
    worst_nodes: list[tuple[str, str, float, str]] = field(default_factory=list)   # node, op, own error, choice


@dataclass
class AccuracyReport:
    model: str
    devices: list[str]
    output: str
    calibration: str                 # e.g. "minmax on 4 feeds (8 samples)"
    evaluation: str                  # e.g. "4 feeds (8 samples)"
    baseline: PrecisionResult        # fp32
    results: list[PrecisionResult] = field(default_factory=list)

    def __getitem__(self, precision: str) -> PrecisionResult:
        for r in [self.baseline, *self.results]:
            if r.precision == precision:
                return r
        raise KeyError(precision)


def _batch(feed: dict[str, np.ndarray]) -> int:
    first = next(iter(feed.values()))
    return int(first.shape[0]) if np.ndim(first) else 1


def _flat(y: np.ndarray, n: int) -> np.ndarray:
    """[samples, everything else] view of an output."""
    y = np.asarray(y)
    if y.ndim == 0:
        return y.reshape(1, 1)
    if y.shape[0] == n:
        return y.reshape(n, -1)
    return y.reshape(1, -1)


def metrics(y: np.ndarray, ref: np.ndarray, labels: np.ndarray | None = None) -> dict[str, float]:
    """The report's metrics of outputs ``y`` against ``ref`` ([samples, ...])."""
    y64, r64 = np.asarray(y, np.float64), np.asarray(ref, np.float64)
    if y64.shape != r64.shape:
        raise InputError(f"output shapes differ: {y64.shape} vs fp32 {r64.shape}")
    diff = np.abs(y64 - r64)
    rmax, rmean = float(np.abs(r64).max(initial=0.0)), float(np.abs(r64).mean()) if r64.size else 0.0
    out = {
        "max_rel_error": float(diff.max(initial=0.0)) / rmax if rmax > 0 else float(diff.max(initial=0.0)),
        "mean_rel_error": float(diff.mean()) / rmean if rmean > 0 else float(diff.mean()) if diff.size else 0.0,
    }
    n = y64.shape[0] if y64.ndim else 1
    yf, rf = _flat(y64, n), _flat(r64, n)
    out["top1_agreement"] = float(np.mean(yf.argmax(1) == rf.argmax(1)))
    norm = float(np.linalg.norm(yf) * np.linalg.norm(rf))
    out["cosine"] = float(np.sum(yf * rf)) / norm if norm > 0 else float(np.array_equal(yf, rf))
    if labels is not None:
        out["accuracy"] = float(np.mean(yf.argmax(1) == np.asarray(labels).reshape(-1)))
    return out


def _ran_at(session) -> str:
    seen: list[str] = []
    for sg in session.subgraphs:
        tag = f"{sg.device}:{getattr(sg, 'precision', '?')}"
        if tag not in seen:
            seen.append(tag)
    return ", ".join(seen)


WORST = 5


def _run(model: Any, devices: list[str], precision: str, calibration: Any,
         feeds: list[dict[str, np.ndarray]], output: int) -> tuple[np.ndarray, str, list]:
    import nnhal

    with nnhal.Session(model, devices=devices, precision=precision, calibration=calibration) as s:
        s.options.progress = False
        outs = [np.asarray(s.run(f)[output]) for f in feeds]
        ran_at = _ran_at(s)
        worst = _worst_nodes(s, feeds[-1]) if precision in QUANTIZED else []
    return np.concatenate([o if o.ndim else o.reshape(1) for o in outs], axis=0), ran_at, worst


def _worst_nodes(session, feed: dict[str, np.ndarray]) -> list[tuple[str, str, float, str]]:
    """The WORST weighted nodes by their own contribution to the output error (see the module doc)."""
    from nnhal.optimizer.mixed import sensitivities

    if session.mixed is not None:
        nodes = session.mixed.nodes
    elif session.graph.prepared_graph is not None:
        nodes = sensitivities(session.graph.prepared_graph, session.quantization, feed)[1]
    else:
        return []
    return [(n.node, n.op_type, n.error, n.choice) for n in sorted(nodes, key=lambda n: -n.error)[:WORST]]


def _model_name(model: Any) -> str:
    if isinstance(model, (str, os.PathLike)):
        return str(model)
    return type(model).__name__


def compare_precisions(model: Any, feeds_list: Sequence[dict[str, np.ndarray]],
                       precisions: Sequence[str] = ("fp16", "int8", "uint8"),
                       devices: Sequence[str] | None = (FALLBACK_DEVICE,), labels: Any = None,
                       calibration_method: str = "minmax", output: int | str = 0,
                       calibration_feeds: Sequence[dict[str, np.ndarray]] | None = None,
                       progress: bool = False) -> AccuracyReport:
    """Each precision against fp32 on the same inputs (see the module doc).

    model        a path, 'zoo:<name>[?...]', bytes or onnx.ModelProto
    feeds_list   feeds (dicts input name -> array), batch first
    labels       None, or one label per sample of all feeds, in order (an array
                 of the total batch size), or one array per feed
    output       the output compared, by index or name
    calibration_feeds  feeds to calibrate on; then all of ``feeds_list`` is evaluated
                 (and ``labels`` label ``feeds_list``)
    """
    from nnhal.optimizer.calibrate import calibrate
    from nnhal.zoo import resolve

    name = _model_name(model)
    if isinstance(model, str):
        model = resolve(model)
    feeds = [dict(f) for f in feeds_list]
    if not feeds:
        raise InputError("compare_precisions needs at least one feed")
    devices = list(devices) if devices else [FALLBACK_DEVICE]
    sizes = [_batch(f) for f in feeds]
    if labels is not None:
        if isinstance(labels, (list, tuple)) and len(labels) == len(feeds) and \
                all(np.ndim(lab) >= 1 and len(lab) == s for lab, s in zip(labels, sizes)):
            labels = np.concatenate([np.asarray(lab).reshape(-1) for lab in labels])
        labels = np.asarray(labels).reshape(-1)
        if labels.size != sum(sizes):
            raise InputError(f"labels has {labels.size} entries, the feeds hold {sum(sizes)} samples")
    if calibration_feeds is not None:
        calib, evaluate, eval_labels, separate = [dict(f) for f in calibration_feeds], feeds, labels, True
        if not calib:
            raise InputError("calibration_feeds is empty")
    else:
        half = len(feeds) // 2
        separate = bool(half)
        calib, evaluate = (feeds[:half], feeds[half:]) if half else (feeds, feeds)
        eval_labels = labels[sum(sizes[:half]):] if labels is not None and half else labels
    n_eval = sum(_batch(f) for f in evaluate)

    import nnhal

    with nnhal.Session(model, devices=devices) as probe:
        names = probe.output_names
    if isinstance(output, str):
        if output not in names:
            raise InputError(f"the model has no output '{output}' (outputs: {names})")
        index = names.index(output)
    else:
        index = int(output)
        if not 0 <= index < len(names):
            raise InputError(f"output index {output} is out of range; the model has {len(names)} outputs")

    ref, ran, _ = _run(model, devices, "fp32", None, evaluate, index)
    baseline = PrecisionResult("fp32", ran_at=ran, max_rel_error=0.0, mean_rel_error=0.0,
                               top1_agreement=1.0, cosine=1.0)
    if eval_labels is not None:
        baseline.accuracy = metrics(ref, ref, eval_labels)["accuracy"]

    tables: dict[str, Any] = {}
    results = []
    for p in precisions:
        row = PrecisionResult(p)
        try:
            ranges = None
            if p in QUANTIZED:
                scheme = "int8" if p == "int8" else "uint8"
                key = "any" if calibration_method == "minmax" else scheme   # minmax ranges ignore the scheme
                if key not in tables:
                    tables[key] = calibrate(model, calib, method=calibration_method, scheme=scheme,
                                            progress=progress)       # the table: its per-channel extremes smooth
                ranges = tables[key]
            y, row.ran_at, row.worst_nodes = _run(model, devices, p, ranges, evaluate, index)
        except NnhalError as exc:
            row.available, row.reason = False, f"{type(exc).__name__}: {exc}"
            results.append(row)
            continue
        m = metrics(y, ref, eval_labels)
        row.max_rel_error, row.mean_rel_error = m["max_rel_error"], m["mean_rel_error"]
        row.top1_agreement, row.cosine, row.accuracy = m["top1_agreement"], m["cosine"], m.get("accuracy")
        results.append(row)
    n_calib = sum(_batch(f) for f in calib)
    return AccuracyReport(
        name, devices, names[index],
        f"{calibration_method} on {len(calib)} feed(s) ({n_calib} samples)"
        + ("" if separate else ", the evaluation feed"),
        f"{len(evaluate)} feed(s) ({n_eval} samples)", baseline, results)


def format_report(report: AccuracyReport) -> str:
    """The report as a text table."""
    lines = [f"model: {report.model}",
             f"devices: {', '.join(report.devices)}  output: {report.output}",
             f"calibration: {report.calibration}; evaluation: {report.evaluation}"]
    with_acc = report.baseline.accuracy is not None
    head = f"{'precision':10s} {'ran at':22s} {'max rel err':>11s} {'mean rel err':>12s} {'top-1 agree':>11s} " \
           f"{'cosine':>9s}" + (f" {'accuracy':>9s}" if with_acc else "")
    lines += [head, "-" * len(head)]
    for r in [report.baseline, *report.results]:
        if not r.available:
            lines.append(f"{r.precision:10s} not available: {r.reason}")
            continue
        row = f"{r.precision:10s} {r.ran_at:22s} {r.max_rel_error:11.3e} {r.mean_rel_error:12.3e} " \
              f"{r.top1_agreement:11.2%} {r.cosine:9.6f}"
        if with_acc:
            row += f" {r.accuracy:9.2%}" if r.accuracy is not None else f" {'-':>9s}"
        lines.append(row)
    for r in report.results:
        if r.worst_nodes:
            lines.append(f"worst nodes at {r.precision} (output error when each alone is quantized):")
            lines += [f"  {name:36s} {op:8s} {err:9.3%}" + (f"  ({choice})" if r.precision == "mixed" else "")
                      for name, op, err, choice in r.worst_nodes]
    return "\n".join(lines)
