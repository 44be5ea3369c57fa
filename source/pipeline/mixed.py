"""precision="mixed": the search of nnhal.optimizer.mixed, driving the stages for each of its probes.

A probe is a whole prepare (every stage) under trial options, run once on the bound inputs. The probes and
the final prepare rewrite the same graph on the same inputs, so calibration is done once and kept in a
:class:`CalibrationMemo`; the last probe is kept prepared, and adopted when it is what the search chose."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np

from nnhal.errors import InputError, NnhalError
from nnhal.graph.graph import Graph
from nnhal.optimizer.mixed import choose_mixed
from nnhal.optimizer.outliers import Int8Plan
from nnhal.optimizer.quantize import quantize_activations
from nnhal.options import Options
from nnhal.pipeline.precision_plan import CalibrationMemo
from nnhal.pipeline.prepare import Prepared, out_of_memory, plan, prepare
from nnhal.pipeline.request import Request
from nnhal.pipeline.timing import StageTime, StageTimes

# NOTE: mixed measures per-node sensitivities on the first half of a batch of at least SENSITIVITY_ROWS rows:
# each node's own error is a ratio of norms, stable over 8 of 16 sentences (MiniLM), and the search's fp32
# runs of the rest of the graph after each node were most of its time
SENSITIVITY_ROWS = 8


class _Held:
    """The last probe, still prepared, and its options."""

    def __init__(self) -> None:
        self.last: tuple[Options, Prepared] | None = None

    def keep(self, options: Options, probe: Prepared) -> None:
        """Hold ``probe`` (prepared under ``options``), releasing the one held before."""
        self.release()
        self.last = (options, probe)

    def take(self, options: Options) -> Prepared | None:
        """The held probe if it was prepared under ``options`` (then no longer held); else None."""
        if self.last is not None and self.last[0] == options:
            probe, self.last = self.last[1], None
            return probe
        return None

    def release(self) -> None:
        if self.last is not None:
            probe, self.last = self.last[1], None
            probe.release()


def _probe(request: Request, memo: CalibrationMemo, held: _Held
           ) -> tuple[list[np.ndarray], Graph | None, Int8Plan | None]:
    """Outputs of the bound inputs when prepared under the request's options, with the prepared graph and
    its int8 plan; the probe stays prepared (held) until the next."""
    probe = prepare(request, memo)
    try:
        outputs = probe.run(request.inputs)
    except BaseException:
        probe.release()
        raise
    held.keep(request.options, probe)
    return outputs, probe.graph, probe.int8_plan


def _plan_rows(request: Request, memo: CalibrationMemo
               ) -> tuple[Graph, Int8Plan | None, dict[str, np.ndarray]] | None:
    """The quantized rewrite of the graph planned (and its activations calibrated from ``memo``, not
    compiled) on the first half of the input rows; None when the batch is small, the inputs do not share a
    leading batch axis, or the graph does not plan on fewer rows (fixed shapes)."""
    sizes = {a.shape[0] if a.ndim else 0 for a in request.inputs.values()}
    if len(sizes) != 1 or min(sizes) < SENSITIVITY_ROWS or memo.ranges is None:
        return None
    rows = min(sizes) // 2
    feeds = {n: a[:rows] for n, a in request.inputs.items()}
    try:
        planned = plan(replace(request, inputs=feeds), memo)
        quantize_activations(planned.cut.graph, planned.cut.subgraphs, request.options.precision, feeds,
                             memo.ranges)
    except NnhalError:
        return None
    return planned.cut.graph, planned.int8_plan, feeds


def prepare_mixed(request: Request) -> tuple[Prepared, Any]:
    """The prepare the search chose, and the search's report (nnhal.optimizer.mixed.MixedReport)."""
    missing = [n for n in request.graph.inputs if n not in request.inputs]
    if missing:
        raise InputError(f"precision 'mixed' measures errors on real inputs: set {missing} before prerun_graph")
    # NOTE: the search's probes and the final prepare calibrate the same rewritten graph on the same inputs:
    # once is enough (calibration was two thirds of each probe's prepare on MiniLM)
    memo, held = CalibrationMemo(), _Held()
    t0 = time.perf_counter()
    try:
        with out_of_memory("choosing mixed precisions"):
            options, report = choose_mixed(request.graph, request.options,
                                           lambda opts: _probe(replace(request, options=opts), memo, held),
                                           dict(request.inputs),
                                           lambda opts: _plan_rows(replace(request, options=opts), memo))
        chosen = held.take(options)
    finally:
        held.release()
    searched = StageTime("mixed_search", time.perf_counter() - t0)
    if chosen is None:      # else the search's last probe is the prepare it chose: adopted, not redone
        chosen = prepare(replace(request, options=options), memo, StageTimes())
    chosen.stages.times.insert(0, searched)
    return chosen, report
