"""precision="mixed": the cheapest assignment of nodes to uint8 or fp32 that keeps a measured error bound.

    options, report = choose_mixed(graph, options, probe)

1. Whole graph at uint8 everywhere (the starting error): ``probe(options)``
   prepares and runs the graph on the inputs set before prerun and returns
   its outputs, its prepared graph (the quantized precision's rewrite, with
   every tensor's calibrated Quantization) and the core's Int8Plan. One fp32
   run of that prepared graph (the same function) is the reference.
2. Sensitivity, per node, its own: every weighted node (Conv, Gemm, MatMul
   with constant weights) is evaluated alone on the fp32 values of its inputs
   (one fp32 run of the prepared graph keeps every tensor), quantized as the
   device will: a dynamic Gemm per token and per block of
   ``quantize.BLOCK`` columns (weights per output channel and block), others
   with weights per output channel and the tensor's calibrated scale; that
   output alone is then carried through the rest of the graph in fp32, and
   its error is the graph outputs' relative L2 error. Errors of other nodes do
   not leak into a node's number. With a ``subset`` planner (the core's: the
   first half of a batch of 8 rows or more), this is measured on those rows.
3. Cheapest assignment: independent noise adds up, so the output error is
   modelled as E^2 = c * sum of the quantized nodes' e_i^2, c fitted on step
   1's uint8 error. Nodes go back to fp32 by the most error removed per
   multiply-add (e_i^2 / MACs) until the model predicts the target
   (``MARGIN`` x the bound: unseen inputs err more than the calibration
   ones; 90% of it at first); the result is measured, c is refitted on the
   measurement, and the refitted model's assignment (aiming at the target
   itself) is measured too (more nodes in fp32 after a
   miss, fewer after a pass with room left), at most ``ROUNDS`` measurements;
   the passing assignment with the fewest fp32 nodes wins. If none passes:
   fp16, then fp32.

Every step, and per node what it chose and why, goes in the MixedReport. The
search costs two to four quantized prepares, which share one calibration (the
pipeline's ``CalibrationMemo``, nnhal.pipeline.mixed) and the lowered weights (``quantize.per_block_int8``
caches them); the final prepare adopts the last probe when that is the
assignment chosen; and, per weighted node, one fp32 run of the graph after it
(most of the time). On MiniLM: 2.5-4x a uint8 prepare, depending on the
machine's load (benchmarks/results/int8_minilm.txt); 56-58% of the multiply-adds stay quantized at a 1%
bound, 0.72-0.73% measured on held-out sentences. A progress bar shows on a TTY stderr
unless ``Options(progress=False)``.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from dataclasses import replace as with_
from typing import Any, Protocol, TypeVar

import numpy as np

from nnhal.graph.graph import Graph


class MixedOptions(Protocol):
    """What the search reads of the options it is given (a frozen dataclass, replaced field by field):
    the optimizer takes plain values and does not import nnhal.options, which sits above it."""

    precision: str
    keep_fp32: frozenset[str]
    mixed_tolerance: float
    progress: bool


Options = TypeVar("Options", bound=MixedOptions)

ROUNDS = 3
# NOTE: the search measures on the inputs it is prepared with; unseen inputs err more (MiniLM, 16 calibration
# sentences: held-out batches measured 0.93-1.39% where calibration measured 0.85%; 1.02% over all 48
# held-out sentences at MARGIN 0.75), so it aims at and accepts MARGIN x the bound on the calibration inputs
# (with blocks of 8 and measured smoothing: 0.67-0.69% on them, 0.72-0.73% on 48 held-out sentences)
MARGIN = 0.7
WEIGHTED = ("Conv", "Gemm", "MatMul")
Probe = Callable[[Options], tuple[list[np.ndarray], Graph | None, Any]]
# (the quantized rewrite of the graph planned on fewer input rows, its Int8Plan, those rows) or None
Subset = Callable[[Options], "tuple[Graph, Any, dict[str, np.ndarray]] | None"]


@dataclass
class NodeSensitivity:
    """One weighted node: its own quantization error, its cost, and what mixed chose for it."""

    node: str
    op_type: str
    error: float            # the outputs' relative L2 error when it alone is quantized (on fp32 inputs)
    macs: int
    choice: str = "uint8"
    why: str = ""


@dataclass
class MixedReport:
    """What precision="mixed" chose: the precision, nodes kept in fp32, every measured error, per node why."""

    precision: str
    fp32_nodes: list[str]
    tried: list[tuple[str, float]]
    nodes: list[NodeSensitivity] = field(default_factory=list)

    @property
    def int8_fraction(self) -> float:
        """The share of the weighted nodes' multiply-adds that run quantized (0 unless uint8 was chosen)."""
        total = sum(n.macs for n in self.nodes)
        if self.precision != "uint8" or not total:
            return 0.0
        return sum(n.macs for n in self.nodes if n.choice == "uint8") / total

    def table(self) -> str:
        """One line per weighted node, most sensitive first."""
        rows = sorted(self.nodes, key=lambda n: -n.error)
        return "\n".join(f"{n.node:<36} {n.op_type:<6} {n.choice:<6} own error {n.error:.3%}  {n.macs:>12,d} MACs  "
                         f"{n.why}" for n in rows)

    def __str__(self) -> str:
        steps = "; ".join(f"{what}: {err:.4%}" for what, err in self.tried)
        kept = f", {len(self.fp32_nodes)} node(s) kept in fp32: {self.fp32_nodes}" if self.fp32_nodes else ""
        share = f", {self.int8_fraction:.0%} of the multiply-adds quantized" if self.precision == "uint8" else ""
        return f"mixed chose {self.precision}{kept}{share} (relative output error: {steps})"


def relative_error(got: list[np.ndarray], reference: list[np.ndarray]) -> float:
    """sqrt(sum ||got - ref||^2 / sum ||ref||^2) over all outputs."""
    num = sum(float(np.sum((a.astype(np.float64) - b) ** 2)) for a, b in zip(got, reference))
    den = sum(float(np.sum(np.asarray(b, np.float64) ** 2)) for b in reference)
    return float(np.sqrt(num / max(den, 1e-30)))


def choose_mixed(graph: Graph, options: Options, probe: Probe, feeds: dict[str, np.ndarray],
                 subset: Subset | None = None) -> tuple[Options, MixedReport]:
    """The options to prepare with under precision="mixed", and the report of how they were found.

    ``subset``, when given and not None for these inputs, plans the rewrite on fewer input rows: the
    per-node sensitivities are measured on those (their fp32 runs of the rest of the graph are most of the
    search's time); every error the search accepts is still measured on all of ``feeds``."""
    from nnhal.optimizer.calibrate import _Progress

    bar = _Progress(options.progress and sys.stderr.isatty(), None, "mixed precision search")
    base = with_(options, precision="uint8", keep_fp32=frozenset(options.keep_fp32))
    tried: list[tuple[str, float]] = []
    got, prepared, plan = probe(base)
    bar.step()
    if prepared is not None:
        # NOTE: the uint8 rewrite's graph computes the fp32 function (Gemm for MatMul + Add, smoothing exact),
        # so its fp32 run is the reference too: no separate fp32 prepare
        fewer = subset(base) if subset is not None else None
        if fewer is None:
            reference, nodes = sensitivities(prepared, plan, feeds, bar)
        else:
            reference = fp32_outputs(prepared, feeds)
            nodes = sensitivities(*fewer, bar)[1]
    else:
        reference, nodes = probe(with_(options, precision="fp32"))[0], []
    err = relative_error(got, reference)
    tried.append(("uint8", err))
    target = options.mixed_tolerance * MARGIN
    if err <= target:
        for n in nodes:
            n.why = "uint8 everywhere keeps the bound"
        bar.close()
        return base, MixedReport("uint8", [], tried, nodes)
    quantized = [n for n in nodes if n.error > 0]
    noise = sum(n.error ** 2 for n in quantized)
    gain = err ** 2 / noise if noise > 0 else np.inf
    order = sorted(quantized, key=lambda n: -(n.error ** 2) / max(n.macs, 1))
    budget = target ** 2 * 0.9             # aim under the target: the noise model is approximate
    best: tuple[list[NodeSensitivity], Options] | None = None
    measured: set[int] = set()
    kept = _cheapest(order, noise, gain, budget)
    for _ in range(ROUNDS):
        measured.add(len(kept))
        trial = with_(base, keep_fp32=frozenset(n.node for n in kept) | options.keep_fp32)
        got, _, _ = probe(trial)
        bar.step()
        err = relative_error(got, reference)
        tried.append((f"uint8 with {len(kept)} layer(s) in fp32", err))
        if err <= target and (best is None or len(kept) < len(best[0])):
            best = (kept, trial)
        left = noise - sum(n.error ** 2 for n in kept)
        if left <= 0:
            break
        # refit on what was measured: more nodes back to fp32 after a miss, fewer after a pass with room left;
        # NOTE: the refitted model is anchored on a measurement, so it aims at the target itself (the first
        # prediction aims under it)
        gain = err ** 2 / left
        budget = target ** 2
        kept = _cheapest(order, noise, gain, budget)
        if best is None and len(kept) <= max(measured):        # a miss must move nodes back to fp32
            kept = order[:min(max(measured) + 1, len(order) - 1)]
        if len(kept) in measured or (best is not None and len(kept) > len(best[0])):
            break
    if best is not None:
        kept, trial = best
        _explain(nodes, kept, "uint8")
        bar.close()
        return trial, MixedReport("uint8", sorted(n.node for n in kept), tried, nodes)
    fp16 = with_(options, precision="fp16")
    got, _, _ = probe(fp16)
    bar.step()
    err = relative_error(got, reference)
    tried.append(("fp16", err))
    bar.close()
    if err <= target:
        _explain(nodes, nodes, "fp16")
        return fp16, MixedReport("fp16", [], tried, nodes)
    _explain(nodes, nodes, "fp32")
    return with_(options, precision="fp32"), MixedReport("fp32", [], tried, nodes)


def _cheapest(order: list[NodeSensitivity], noise: float, gain: float, budget: float) -> list[NodeSensitivity]:
    """The shortest prefix of ``order`` (most error per multiply-add first) to keep in fp32 so that the
    predicted error ``gain * (noise - its e_i^2)`` fits ``budget``; never every node (that is fp32 itself)."""
    kept: list[NodeSensitivity] = []
    left = noise
    for n in order:
        if gain * left <= budget or len(kept) >= len(order) - 1:
            break
        kept.append(n)
        left -= n.error ** 2
    return kept


def _explain(nodes: list[NodeSensitivity], kept: list[NodeSensitivity], precision: str) -> None:
    names = {n.node for n in kept}
    for n in nodes:
        if precision != "uint8":
            n.choice, n.why = precision, f"no uint8 assignment kept the bound; the whole graph runs {precision}"
        elif n.node in names:
            n.choice, n.why = "fp32", "among the most error removed per multiply-add"
        else:
            n.choice, n.why = "uint8", "its share of the error fits in the bound"


def sensitivities(graph: Graph, plan: Any, feeds: dict[str, np.ndarray], bar=None
                  ) -> tuple[list[np.ndarray], list[NodeSensitivity]]:
    """(the fp32 outputs, each weighted node's own quantization error on the fp32 values of its inputs)
    (see the module doc)."""
    from nnhal.device.manager import graph_compiler
    from nnhal.graph.tensor import constant
    from nnhal.optimizer.quantize import dynamic_block, per_block_int8, per_channel_int8

    names = [o for n in graph.nodes for o in n.outputs if o]
    values = dict(feeds)
    graph_compiler()(graph, graph.nodes, list(graph.inputs), names).run(values)
    outputs = [values[o] for o in graph.outputs]
    index = {n.name: i for i, n in enumerate(graph.nodes)}
    higher = set(plan.higher) if plan is not None else set()
    dynamic = dict(plan.dynamic) if plan is not None else {}
    out: list[NodeSensitivity] = []
    for node in graph.nodes:
        if node.domain or node.op_type not in WEIGHTED or node.name in higher:
            continue
        w = graph.tensors[node.inputs[1]]
        x = graph.tensors[node.inputs[0]]
        if not w.is_constant or w.value is None or w.value.dtype != np.float32 or x.is_constant:
            continue
        transposed = node.op_type == "MatMul" or (node.op_type == "Gemm" and not node.attrs.get("transB", 0))
        matrix = w.value.T if transposed and w.value.ndim == 2 else w.value
        if transposed and w.value.ndim != 2:
            continue
        per_token = node.name in dynamic
        preferred = plan.block if plan is not None else None
        block = dynamic_block(matrix.shape[1], preferred) if per_token and matrix.ndim == 2 else 0
        if block:
            wq, ws = per_block_int8(matrix, block)
            deq = (wq.reshape(wq.shape[0], -1, block) * ws[:, :, None]).reshape(wq.shape).astype(np.float32)
        else:
            wq, ws = per_channel_int8(matrix)
            deq = (wq.astype(np.float32) * ws.reshape(-1, *[1] * (wq.ndim - 1))).astype(np.float32)
        xv = values[node.inputs[0]]
        xq = _fake_quantize(xv, x.quant, per_token, block)
        if xq is None:
            continue
        local = graph.copy()
        local.tensors[w.name] = constant(w.name, deq.T if transposed else deq)
        run = {**{n: values[n] for n in node.inputs if n and n in values}, node.inputs[0]: xq}
        graph_compiler()(local, [node], [n for n in node.inputs if n and not local.tensors[n].is_constant],
                      [node.outputs[0]]).run(run)
        y, ref = run[node.outputs[0]], values[node.outputs[0]]
        columns = list(dynamic.get(node.name, ()))
        if columns:                 # the outlier columns the dynamic Gemm computes in float
            y = y.copy()
            y[..., columns] = ref[..., columns]
        error = _downstream_error(graph, index[node.name], node.outputs[0], y, values, outputs)
        macs = int(ref.size * int(np.prod(matrix.shape[1:])))
        out.append(NodeSensitivity(node.name, node.op_type, error, macs))
        if bar is not None:
            bar.step()
    return outputs, out


def fp32_outputs(graph: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The graph's outputs from one fp32 CPU run on ``feeds``."""
    from nnhal.device.manager import graph_compiler

    values = dict(feeds)
    graph_compiler()(graph, graph.nodes, list(graph.inputs), list(graph.outputs)).run(values)
    return [values[o] for o in graph.outputs]


def _downstream_error(graph: Graph, at: int, name: str, value: np.ndarray, values: dict[str, np.ndarray],
                      reference: list[np.ndarray]) -> float:
    """The graph outputs' relative error when only tensor ``name`` (written by node ``at``) is ``value``: the
    rest of the graph runs in fp32 from the fp32 values, so only this node's error reaches the outputs."""
    from nnhal.device.manager import graph_compiler

    after = graph.nodes[at + 1:]
    made = {o for n in after for o in n.outputs if o}
    needed = sorted({i for n in after for i in n.all_inputs if i and i not in made and i in values
                     and not graph.tensors[i].is_constant} | {name})
    run = {i: values[i] for i in needed}
    run[name] = value
    graph_compiler()(graph, after, needed, list(graph.outputs)).run(run)
    got = [run[o] if o in run else values[o] for o in graph.outputs]
    return relative_error(got, reference)


def _fake_quantize(x: np.ndarray, quant, per_token: bool, block: int = 0) -> np.ndarray | None:
    """``x`` through 8-bit quantization and back: per row (token) and ``block`` when ``per_token``, else the
    tensor's own calibrated parameters; None when the tensor has none (the device would not quantize it)."""
    from nnhal.optimizer.quantize import fake_quantize_rows

    if per_token:          # as the CPU's DynamicQuantizeGemm at uint8: each row (block) asymmetric over its range
        return fake_quantize_rows(x, False, block)
    if quant is None:
        return None
    scale = float(np.ravel(quant.scale)[0])
    zero = int(np.ravel(quant.zero_point)[0])
    info = np.iinfo(np.asarray(quant.zero_point).dtype)
    return ((np.clip(np.rint(x / scale) + zero, info.min, info.max) - zero) * scale).astype(np.float32)
