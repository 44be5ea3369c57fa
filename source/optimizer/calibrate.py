"""Post-training calibration: activation ranges from real data, and QDQ ONNX models.

    table = nnhal.calibrate("model.onnx", feeds, method="entropy")      # feeds: dicts name -> array
    nnhal.Session("model.onnx", precision="uint8", calibration=table)   # or table.ranges
    table.save("model.calib.json")                                      # later: calibration="model.calib.json"
    nnhal.calibrate("model.onnx", feeds, output="model.qdq.onnx")       # also write a QDQ model

The fp32 model runs on the CPU device over every feed. Per float tensor
(graph inputs and node outputs; float constants get their extremes, as the
core's own calibration does) it keeps the running extremes and, for the
histogram methods, a histogram (a second pass over the feeds, with the bins
fixed by the first), never the values themselves:

minmax      the observed extremes.
percentile  symmetric tails: [the (100-p)th, the p-th] percentile for uint8;
            for int8 the p-th percentile t of |x|, giving [-t, t] clipped to
            the extremes.
entropy     TensorRT's KL-divergence threshold search: a 2048-bin histogram
            of |x| over [0, max|x|], the threshold t whose 128-level
            quantization of the clipped distribution diverges least from it;
            [-t, t] clipped to the extremes. Exact zeros are left out of the
            histogram (every threshold quantizes them exactly; a ReLU's zero
            spike would otherwise pull t down), and among equal divergences the
            largest t wins (a window holding one spike of a discrete
            distribution, e.g. 8-bit pixels, has divergence 0).

The feeds may be a list or any one-shot iterable (a generator, a data
loader): one feed is in memory at a time (the histogram methods spool a
one-shot iterable's feeds to a temporary folder for their second pass), only
the last few compiled plans are kept for feeds of varying shapes, and a
progress bar (or, off a TTY, a few lines) counts the batches.

The ranges are deterministic for the same model and feeds.
``nnhal.Options(calibration=...)`` / ``nnhal.Session(..., calibration=...)``
take the table itself, its ``ranges`` (a dict tensor -> (min, max)), or the
path of a table saved with ``table.save(path)`` (JSON: ``{"format":
"nnhal-calibration", "version": 1, "method", "scheme", "percentile",
"batches", "ranges": {tensor: [min, max]}}``; ``CalibrationTable.load(path)``
reads it back); anything else is an OptionsError.

The QDQ model (``output=``) has QuantizeLinear -> DequantizeLinear after every
float activation with a range (after its producer, and after graph inputs;
uint8 asymmetric or, for scheme="int8", int8 symmetric, per tensor) and
int8 symmetric per-channel DequantizeLinear weights (int8 initializers) for
Conv, Gemm and MatMul; biases stay float, graph outputs stay float (their
consumers, if any, read the quantized copy). Models below opset 13 are
converted to opset 13 first (per-axis DequantizeLinear needs it).
"""
from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nnhal.errors import InputError, InternalError, LimitError, ModelError, OptionsError, wrapped
from nnhal.graph.graph import Graph
from nnhal.graph.tensor import Quantization, TensorKind
from nnhal.optimizer.quantize import Ranges, uint8_params

METHODS = ("minmax", "percentile", "entropy")
SCHEMES = ("uint8", "int8")
ENTROPY_BINS = 2048
ENTROPY_LEVELS = 128
PERCENTILE_BINS = 8192
MAX_CHANNELS = 8192          # widest last axis whose per-channel extremes a table keeps


# ---------------------------------------------------------------------- the table
def int8_params(lo: float, hi: float) -> Quantization:
    """Symmetric int8 parameters (zero point 0) covering [lo, hi]."""
    amax = max(abs(lo), abs(hi))
    scale = amax / 127.0 if amax > 0 else 1.0
    return Quantization(np.array(scale, np.float32), np.array(0, np.int8))


@dataclass
class CalibrationTable:
    """Calibrated ranges of a model's float tensors (tensor name -> (lo, hi))."""

    method: str
    scheme: str
    ranges: Ranges = field(default_factory=dict)
    percentile: float | None = None
    batches: int = 0
    # per-channel (last axis) extremes of activations of rank >= 2: what SmoothQuant-style smoothing reads
    channels: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = field(default_factory=dict)

    def params(self, name: str) -> Quantization:
        """The per-tensor Quantization of ``name`` under the table's scheme."""
        if name not in self.ranges:
            raise KeyError(f"no calibrated range for tensor '{name}'")
        lo, hi = self.ranges[name]
        return int8_params(lo, hi) if self.scheme == "int8" else uint8_params(lo, hi)

    def __len__(self) -> int:
        return len(self.ranges)

    def __contains__(self, name: object) -> bool:
        return name in self.ranges

    def save(self, path: str | os.PathLike) -> None:
        """Write the table as JSON (``TABLE_FORMAT``, version ``TABLE_VERSION``); floats round-trip exactly."""
        doc = {"format": TABLE_FORMAT, "version": TABLE_VERSION, "method": self.method, "scheme": self.scheme,
               "percentile": self.percentile, "batches": self.batches,
               "ranges": {name: [lo, hi] for name, (lo, hi) in self.ranges.items()},
               "channels": {name: [list(lo), list(hi)] for name, (lo, hi) in self.channels.items()}}
        Path(path).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "CalibrationTable":
        """Read a table ``save`` wrote; OptionsError naming the file and what is wrong with it."""
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise OptionsError(f"calibration: cannot read the table '{path}': {exc}") from exc
        if not isinstance(doc, dict) or doc.get("format") != TABLE_FORMAT:
            raise OptionsError(f"calibration: '{path}' is not a calibration table (no \"format\": "
                               f"\"{TABLE_FORMAT}\"; write one with CalibrationTable.save)")
        if doc.get("version") != TABLE_VERSION:
            raise OptionsError(f"calibration: '{path}' is table version {doc.get('version')!r}; "
                               f"this nnhal reads version {TABLE_VERSION}")
        method, scheme = doc.get("method"), doc.get("scheme")
        if method not in METHODS or scheme not in SCHEMES:
            raise OptionsError(f"calibration: '{path}' has method {method!r} / scheme {scheme!r}; "
                               f"expected one of {METHODS} / {SCHEMES}")
        percentile = doc.get("percentile")
        try:
            channels = {str(n): (tuple(float(v) for v in lo), tuple(float(v) for v in hi))
                        for n, (lo, hi) in (doc.get("channels") or {}).items()}
        except (TypeError, ValueError) as exc:
            raise OptionsError(f"calibration: '{path}' has malformed per-channel extremes: {exc}") from None
        return cls(method, scheme, as_ranges(doc.get("ranges"), f"'{path}' ranges"),
                   None if percentile is None else float(percentile), int(doc.get("batches") or 0), channels)


TABLE_FORMAT = "nnhal-calibration"
TABLE_VERSION = 1


class TableRanges(dict):
    """A dict tensor -> (lo, hi) that also carries a table's per-channel extremes as ``channels``."""

    def __init__(self, ranges: Ranges, channels: dict[str, tuple[tuple[float, ...], tuple[float, ...]]]) -> None:
        super().__init__(ranges)
        self.channels = dict(channels)


def as_ranges(value: Any, what: str = "calibration") -> Ranges:
    """``value`` as tensor name -> (lo, hi) floats: a CalibrationTable, a dict of ranges, or the path
    of a table ``CalibrationTable.save`` wrote. Anything else is an OptionsError naming ``what``.
    A table's per-channel extremes ride along (a TableRanges) for smoothing."""
    if isinstance(value, (str, os.PathLike)):
        value = CalibrationTable.load(value)
    if isinstance(value, CalibrationTable):
        return TableRanges(as_ranges(value.ranges, what), value.channels)
    if not isinstance(value, dict):
        raise OptionsError(f"{what} must be what nnhal.calibrate returns (a CalibrationTable), a dict "
                           f"tensor name -> (min, max), or the path of a saved table; got {type(value).__name__}")
    ranges: Ranges = {}
    for name, pair in value.items():
        try:
            lo, hi = (float(v) for v in pair)
        except (TypeError, ValueError):
            raise OptionsError(f"{what}: the range of '{name}' must be two numbers (min, max); "
                               f"got {pair!r}") from None
        if not isinstance(name, str) or not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
            raise OptionsError(f"{what}: '{name}' -> ({lo}, {hi}) is not a range: expected a tensor name "
                               "and finite min <= max")
        ranges[name] = (lo, hi)
    return TableRanges(ranges, value.channels) if isinstance(value, TableRanges) else ranges


# ---------------------------------------------------------------------- progress
class _Progress:
    """A bar on a TTY stderr; otherwise a few plain lines; nothing when disabled."""

    def __init__(self, enabled: bool, total: int | None, label: str) -> None:
        self.enabled, self.total, self.label = enabled, total, label
        self.tty = enabled and hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
        self.done, self.start = 0, time.perf_counter()
        if enabled and not self.tty:
            print(f"{label}: {total if total is not None else '?'} batch(es)", file=sys.stderr, flush=True)

    def step(self) -> None:
        self.done += 1
        if not self.enabled:
            return
        if self.tty:
            if self.total:
                filled = int(30 * self.done / self.total)
                bar = "#" * filled + "-" * (30 - filled)
                sys.stderr.write(f"\r{self.label} [{bar}] {self.done}/{self.total}")
            else:
                sys.stderr.write(f"\r{self.label} {self.done}")
            sys.stderr.flush()
        elif self.total and self.total >= 4 and self.done == self.total // 2:
            print(f"{self.label}: {self.done}/{self.total}", file=sys.stderr, flush=True)
        elif self.total is None and self.done in (10, 100, 1000, 10000, 100000):
            print(f"{self.label}: {self.done} so far", file=sys.stderr, flush=True)

    def close(self) -> None:
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.start
        if self.tty:
            sys.stderr.write("\n")
        print(f"{self.label}: done, {self.done} batch(es) in {elapsed:.1f} s", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- running the model
def _load(model: Any):
    """(nnhal Graph, ModelProto or None) of a path, 'zoo:' spec, bytes or ModelProto."""
    import onnx

    from nnhal.serializer.onnx_import import load_onnx
    from nnhal.zoo import resolve

    if isinstance(model, (str, Path)):
        model = resolve(str(model))
    proto = model if isinstance(model, onnx.ModelProto) else None
    return load_onnx(model), proto


def _proto(model: Any):
    import onnx

    from nnhal.zoo import resolve

    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model))
    resolved = resolve(str(model))
    return resolved if isinstance(resolved, onnx.ModelProto) else onnx.load(resolved)


def _as_feed(graph: Graph, feed: Any) -> dict[str, np.ndarray]:
    names = list(graph.inputs)
    if isinstance(feed, dict):
        out = {k: np.asarray(v) for k, v in feed.items()}
    elif isinstance(feed, np.ndarray) and len(names) == 1:
        out = {names[0]: feed}
    elif isinstance(feed, (list, tuple)):
        out = {n: np.asarray(v) for n, v in zip(names, feed)}
    else:
        raise InputError(f"a calibration feed must be a dict name -> array (inputs: {names}), "
                         f"got {type(feed).__name__}")
    missing = [n for n in names if n not in out]
    if missing:
        raise InputError(f"calibration feed lacks inputs {missing} (inputs: {names})")
    return {n: np.require(out[n], requirements="C") for n in names}


class _Feeds:
    """The calibration feeds, read once or twice, one feed in memory at a time.

    A list, tuple or array is read again for a second pass. A one-shot
    iterable (a generator, a data loader) is read once; when a second pass
    needs it, each feed is spooled on the first pass to a temporary folder
    (one .npy per input) and read back from there, so memory never holds more
    than one feed whatever the data set's size.
    """

    def __init__(self, graph: Graph, source: Iterable[Any], passes: int) -> None:
        self.graph, self.source = graph, source
        self.rereadable = isinstance(source, (Sequence, np.ndarray))
        self.total: int | None = len(source) if hasattr(source, "__len__") else None
        self.spool = tempfile.TemporaryDirectory(prefix="nnhal-calibrate-") \
            if passes > 1 and not self.rereadable else None
        self.count = 0

    def first(self) -> Iterator[dict[str, np.ndarray]]:
        for raw in self.source:
            feed = _as_feed(self.graph, raw)
            if self.spool is not None:
                for i, name in enumerate(self.graph.inputs):
                    np.save(os.path.join(self.spool.name, f"{self.count}_{i}.npy"), feed[name])
            self.count += 1
            yield feed
        if self.count == 0:
            raise InputError("calibration needs at least one feed")
        self.total = self.count

    def again(self) -> Iterator[dict[str, np.ndarray]]:
        if self.spool is None:
            yield from (_as_feed(self.graph, raw) for raw in self.source)
            return
        for k in range(self.count):
            yield {name: np.load(os.path.join(self.spool.name, f"{k}_{i}.npy"))
                   for i, name in enumerate(self.graph.inputs)}

    def close(self) -> None:
        if self.spool is not None:
            self.spool.cleanup()


class _Runner:
    """fp32 CPU runs of a graph, every tensor kept; one compiled plan per input-shape signature.

    The inferred graph of every signature is kept (``graphs``); only the last
    ``MAX_PLANS`` compiled plans (with their arenas) are, so feeds of many
    shapes (sentences of every length) do not grow memory without bound.
    """

    MAX_PLANS = 4

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.plans: dict[tuple, tuple[Graph, Any]] = {}
        self.seen: dict[tuple, Graph] = {}

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from nnhal.device.manager import graph_compiler
        from nnhal.optimizer.infer import infer_graph

        key = tuple((n, feed[n].dtype.str, feed[n].shape) for n in self.graph.inputs)
        if key not in self.plans:
            if key in self.seen:
                self.seen.pop(key)
            g = self.graph.copy()
            for name in g.inputs:
                t = g.tensors[name]
                if t.dtype is not None and feed[name].dtype != t.dtype:
                    raise InputError(f"input '{name}' expects dtype {t.dtype}, got {feed[name].dtype}")
                t.dtype, t.shape = feed[name].dtype, tuple(feed[name].shape)
            infer_graph(g, fold=True)
            names = [o for n in g.nodes for o in n.outputs if o]
            if len(self.plans) >= self.MAX_PLANS:
                self.plans.pop(next(iter(self.plans)))
            self.plans[key] = (g, graph_compiler()(g, g.nodes, list(g.inputs), names))
            self.seen[key] = g
        else:
            self.plans[key] = self.plans.pop(key)        # most recently used last
        g, plan = self.plans[key]
        values = dict(feed)
        plan.run(values)
        return values

    def graphs(self) -> list[Graph]:
        return list(self.seen.values())


def _floats(values: dict[str, np.ndarray]):
    for name, v in values.items():
        if isinstance(v, np.ndarray) and v.dtype.kind == "f" and v.size:
            yield name, v


# ---------------------------------------------------------------------- range selection
def _percentile_range(hist: np.ndarray, lo: float, hi: float, pct: float) -> tuple[float, float]:
    """[(100-pct)th, pct-th] percentile of a histogram over [lo, hi] (bin edges, conservative)."""
    if hi <= lo:
        return lo, hi
    width = (hi - lo) / len(hist)
    cdf = np.cumsum(hist, dtype=np.float64)
    total = cdf[-1]
    q = pct / 100.0
    upper = int(np.searchsorted(cdf, q * total, side="left"))
    lower = int(np.searchsorted(cdf, (1.0 - q) * total, side="right"))
    return max(lo, lo + lower * width), min(hi, lo + (upper + 1) * width)


def _kl(p: np.ndarray, q: np.ndarray, eps: float = 1e-4) -> float:
    """KL(p || q) of two histograms (normalized here); q's empty bins where p has mass get ``eps``."""
    p = p / p.sum()
    q = q / q.sum()
    mass = p > 0
    q = np.where(mass & (q == 0), eps, q)
    q = q / q.sum()
    return float(np.sum(p[mass] * np.log(p[mass] / q[mass])))


def _entropy_threshold(hist: np.ndarray, amax: float, levels: int = ENTROPY_LEVELS) -> float:
    """TensorRT's KL-divergence threshold search on a histogram of |x| over [0, amax]."""
    bins = len(hist)
    if amax <= 0 or hist.sum() == 0:
        return 0.0
    hist = hist.astype(np.float64)
    width = amax / bins
    total = hist.sum()
    nonzero = hist != 0
    csum = np.concatenate([[0.0], np.cumsum(hist)])                  # csum[k] = sum(hist[:k])
    ccount = np.concatenate([[0], np.cumsum(nonzero)]).astype(np.float64)
    index = np.arange(bins)
    best_i, best_kl = bins, np.inf
    for i in range(levels, bins + 1):
        ref = hist[:i].copy()
        ref[i - 1] += total - csum[i]             # outliers clipped into the last bin
        merged = i // levels                      # 128 groups of `merged` bins, the last takes the rest
        starts = np.arange(levels) * merged
        ends = np.append(starts[1:], i)
        counts = ccount[ends] - ccount[starts]
        per_bin = np.divide(csum[ends] - csum[starts], counts, out=np.zeros(levels), where=counts > 0)
        cand = per_bin[np.minimum(index[:i] // merged, levels - 1)] * nonzero[:i]
        if cand.sum() == 0:
            continue
        kl = _kl(ref, cand)
        if kl <= best_kl + 1e-12:
            best_kl, best_i = kl, i
    return min(amax, best_i * width)


# ---------------------------------------------------------------------- calibrate
def calibrate(model: Any, feeds_iterable: Iterable[Any], method: str = "minmax", scheme: str = "uint8",
              percentile: float = 99.99, output: str | Path | None = None,
              progress: bool = True) -> CalibrationTable:
    """Calibrate a model's activation ranges on ``feeds_iterable`` (fp32, CPU).

    model           a path, 'zoo:<name>[?weights=random]', bytes or onnx.ModelProto
    feeds_iterable  feeds: dicts input name -> array (or arrays in input order, or
                    one array for a one-input model); batch sizes may differ; a
                    list or a one-shot iterator (read one feed at a time)
    method          "minmax", "percentile" or "entropy" (see the module doc)
    scheme          "uint8" (asymmetric) or "int8" (symmetric): how params() and
                    the QDQ model quantize activations
    percentile      for method="percentile", in (50, 100]
    output          a path: also write a QDQ ONNX model there
    progress        a bar on stderr when it is a TTY, else a few lines

    Running out of memory is a LimitError; any other failure that is no NnhalError an InternalError.
    """
    with wrapped(lambda exc: InternalError(f"calibration failed unexpectedly ({type(exc).__name__}: {exc})"),
                 memory=lambda exc: LimitError(f"calibration ran out of memory ({exc or 'MemoryError'}); it keeps "
                                               f"every activation of a feed: calibrate on smaller or fewer feeds")):
        return _calibrate_model(model, feeds_iterable, method, scheme, percentile, output, progress)


def _calibrate_model(model: Any, feeds_iterable: Iterable[Any], method: str, scheme: str, percentile: float,
                     output: str | Path | None, progress: bool) -> CalibrationTable:
    if method not in METHODS:
        raise OptionsError(f"calibration method must be one of {', '.join(METHODS)}; got '{method}'")
    if scheme not in SCHEMES:
        raise OptionsError(f"calibration scheme must be one of {', '.join(SCHEMES)}; got '{scheme}'")
    if method == "percentile" and not 50.0 < float(percentile) <= 100.0:
        raise OptionsError(f"percentile must be in (50, 100], got {percentile}")
    graph, _ = _load(model)
    runner = _Runner(graph)
    passes = 1 if method == "minmax" else 2
    feeds = _Feeds(graph, feeds_iterable, passes)
    try:
        table = _calibrate(graph, runner, feeds, method, scheme, percentile, progress, passes)
    finally:
        feeds.close()
    if output is not None:
        write_qdq(model, table, output, activations=_activations(graph, runner))
    return table


def _calibrate(graph: Graph, runner: _Runner, feeds: _Feeds, method: str, scheme: str, percentile: float,
               progress: bool, passes: int) -> CalibrationTable:
    """The passes of ``calibrate`` over ``feeds``."""
    # pass 1: extremes
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    channels: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    bar = _Progress(progress, feeds.total, f"calibrate ({method}) pass 1/{passes}")
    for feed in feeds.first():
        for name, v in _floats(runner.run(feed)):
            vmin, vmax = float(np.min(v)), float(np.max(v))
            lo[name] = min(lo.get(name, math.inf), vmin)
            hi[name] = max(hi.get(name, -math.inf), vmax)
            if v.ndim >= 2 and 2 <= v.shape[-1] <= MAX_CHANNELS:
                rows = v.reshape(-1, v.shape[-1])
                clo, chi = rows.min(axis=0).astype(np.float64), rows.max(axis=0).astype(np.float64)
                if name in channels and channels[name][0].shape == clo.shape:
                    clo, chi = np.minimum(channels[name][0], clo), np.maximum(channels[name][1], chi)
                channels[name] = (clo, chi)
        bar.step()
    bar.close()
    bad = [n for n in lo if not (math.isfinite(lo[n]) and math.isfinite(hi[n]))]
    if bad:
        raise ModelError(f"calibration saw non-finite values in {len(bad)} tensor(s), first '{bad[0]}'")

    ranges: Ranges = {}
    if method == "minmax":
        ranges = {n: (lo[n], hi[n]) for n in lo}
    else:
        hists: dict[str, np.ndarray] = {}
        symmetric = method == "entropy" or scheme == "int8"
        bins = ENTROPY_BINS if method == "entropy" else PERCENTILE_BINS
        bar = _Progress(progress, feeds.total, f"calibrate ({method}) pass 2/2")
        for feed in feeds.again():
            for name, v in _floats(runner.run(feed)):
                if method == "entropy":
                    data, span = np.abs(v[v != 0]), (0.0, max(abs(lo[name]), abs(hi[name])))
                elif symmetric:
                    data, span = np.abs(v), (0.0, max(abs(lo[name]), abs(hi[name])))
                else:
                    data, span = v, (lo[name], hi[name])
                if span[1] <= span[0]:
                    continue
                h, _ = np.histogram(data, bins=bins, range=span)
                hists[name] = hists[name] + h if name in hists else h.astype(np.int64)
            bar.step()
        bar.close()
        for name in lo:
            low, high = lo[name], hi[name]
            if name not in hists:
                ranges[name] = (low, high)
            elif method == "entropy":
                t = _entropy_threshold(hists[name], max(abs(low), abs(high)))
                ranges[name] = (max(low, -t), min(high, t))
            elif symmetric:
                amax = max(abs(low), abs(high))
                _, t = _percentile_range(hists[name], 0.0, amax, percentile)
                ranges[name] = (max(low, -t), min(high, t))
            else:
                ranges[name] = _percentile_range(hists[name], low, high, percentile)
    ranges = {n: (float(a), float(b)) for n, (a, b) in ranges.items()}
    for g in [graph] + runner.graphs():
        for t in g.tensors.values():
            if t.kind is TensorKind.CONSTANT and t.value is not None and t.value.dtype.kind == "f" \
                    and t.value.size and t.name not in ranges:
                ranges[t.name] = (float(t.value.min()), float(t.value.max()))
    ranges = dict(sorted(ranges.items()))
    return CalibrationTable(method, scheme, ranges, float(percentile) if method == "percentile" else None,
                            feeds.count, {n: (tuple(channels[n][0].tolist()), tuple(channels[n][1].tolist()))
                                          for n in sorted(channels) if n in ranges})


def _activations(graph: Graph, runner: _Runner) -> set[str]:
    """Float tensors computed at run time (graph inputs and non-folded node outputs)."""
    found = set()
    for g in runner.graphs() or [graph]:
        for name, t in g.tensors.items():
            if t.kind in (TensorKind.INPUT, TensorKind.VARIABLE) and t.dtype is not None and t.dtype.kind == "f":
                found.add(name)
        found.update(n for n in g.inputs)
    return found


# ---------------------------------------------------------------------- QDQ model
WEIGHT_OPS = {"Conv": 1, "Gemm": 1, "MatMul": 1}


def _weight_axis(node, weight: np.ndarray) -> int | None:
    """The output-channel axis of a Conv/Gemm/MatMul weight."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "Gemm":
        if weight.ndim != 2:
            return None
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans_b else 1
    if node.op_type == "MatMul":
        return weight.ndim - 1 if weight.ndim >= 2 else None
    return None


def _quantize_weight(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per channel along ``axis``: (int8 weight, float32 scales)."""
    moved = np.moveaxis(w.astype(np.float64), axis, 0).reshape(w.shape[axis], -1)
    amax = np.abs(moved).max(axis=1) if moved.size else np.zeros(w.shape[axis])
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scale.reshape(shape).astype(np.float64)), -127, 127).astype(np.int8)
    return q, scale


def write_qdq(model: Any, table: CalibrationTable, output: str | Path,
              activations: set[str] | None = None):
    """Write the QDQ version of ``model`` quantized with ``table`` to ``output``; returns the ModelProto."""
    import onnx
    from onnx import helper, numpy_helper, version_converter

    proto = onnx.ModelProto()
    proto.CopyFrom(_proto(model))
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None:
        raise ModelError("the model imports no default-domain opset")
    if opset < 13:
        try:
            proto = version_converter.convert_version(proto, 13)
        except Exception as exc:  # noqa: BLE001 - the converter raises plain RuntimeErrors
            raise ModelError(f"cannot convert the model from opset {opset} to 13 for per-channel "
                             f"DequantizeLinear: {exc}") from exc
    g = proto.graph
    inits = {i.name: i for i in g.initializer}
    constants = set(inits) | {o for n in g.node if n.op_type == "Constant" for o in n.output}
    taken = set(inits) | {i.name for i in g.input} | {o for n in g.node for o in n.output} | \
        {i for n in g.node for i in n.input}

    def fresh(base: str) -> str:
        name, k = base, 0
        while name in taken:
            k += 1
            name = f"{base}{k}"
        taken.add(name)
        return name

    act_dtype = np.int8 if table.scheme == "int8" else np.uint8
    new_inits: list = []

    def qdq(name: str) -> tuple[list, str]:
        q = table.params(name)
        scale = fresh(f"{name}_scale")
        zero = fresh(f"{name}_zero_point")
        new_inits.append(numpy_helper.from_array(np.asarray(q.scale, np.float32).reshape(()), scale))
        new_inits.append(numpy_helper.from_array(np.asarray(q.zero_point, act_dtype).reshape(()), zero))
        quant, deq = fresh(f"{name}_quantized"), fresh(f"{name}_dequantized")
        nodes = [helper.make_node("QuantizeLinear", [name, scale, zero], [quant], name=fresh(f"{name}_QuantizeLinear")),
                 helper.make_node("DequantizeLinear", [quant, scale, zero], [deq],
                                  name=fresh(f"{name}_DequantizeLinear"))]
        return nodes, deq

    # activations: graph inputs and node outputs with a range
    runtime = activations if activations is not None else set(table.ranges) - constants
    targets = [i.name for i in g.input if i.name not in inits] + [o for n in g.node for o in n.output if o]
    consumed = {i for n in g.node for i in n.input}
    targets = [t for t in targets if t in runtime and t in table.ranges and t not in constants and t in consumed]
    target_set = set(targets)
    replaced: dict[str, str] = {}
    inserted: dict[str, list] = {}
    for t in targets:
        nodes, deq = qdq(t)
        inserted[t] = nodes
        replaced[t] = deq

    # weights: int8 per-channel DequantizeLinear from int8 initializers
    weight_deq: dict[tuple[str, int], str] = {}
    weight_nodes: list = []
    for node in g.node:
        idx = WEIGHT_OPS.get(node.op_type)
        if idx is None or len(node.input) <= idx or node.input[idx] not in inits:
            continue
        init = inits[node.input[idx]]
        if init.data_type != onnx.TensorProto.FLOAT:
            continue
        w = numpy_helper.to_array(init)
        axis = _weight_axis(node, w)
        if axis is None:
            continue
        key = (init.name, axis)
        if key not in weight_deq:
            q, scale = _quantize_weight(w, axis)
            qname, sname, zname = fresh(f"{init.name}_quantized"), fresh(f"{init.name}_scale"), \
                fresh(f"{init.name}_zero_point")
            new_inits += [numpy_helper.from_array(q, qname), numpy_helper.from_array(scale, sname),
                          numpy_helper.from_array(np.zeros(scale.shape, np.int8), zname)]
            deq = fresh(f"{init.name}_dequantized")
            weight_nodes.append(helper.make_node("DequantizeLinear", [qname, sname, zname], [deq],
                                                 name=fresh(f"{init.name}_DequantizeLinear"), axis=axis))
            weight_deq[key] = deq
        node.input[idx] = weight_deq[key]

    # rewire consumers and lay the nodes out in order
    out_nodes = list(weight_nodes)
    for i in g.input:
        if i.name in inserted:
            out_nodes += inserted[i.name]
    for node in g.node:
        for k, name in enumerate(node.input):
            if name in replaced:
                node.input[k] = replaced[name]
        out_nodes.append(node)
        for o in node.output:
            if o in target_set:
                out_nodes += inserted[o]
    used = {i for n in out_nodes for i in n.input}
    kept_inits = [i for i in g.initializer if i.name in used]
    del g.node[:]
    g.node.extend(out_nodes)
    del g.initializer[:]
    g.initializer.extend(kept_inits + new_inits)
    graph_inputs = [i for i in g.input if i.name not in inits or i.name in used]
    del g.input[:]
    g.input.extend(graph_inputs)
    proto.producer_name = "nnhal-calibrate"
    doc = f"QDQ model by nnhal.calibrate (method {table.method}, scheme {table.scheme})"
    proto.doc_string = doc
    onnx.checker.check_model(proto)
    onnx.save(proto, str(output))
    return proto
