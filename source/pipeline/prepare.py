"""The stages in order: :func:`plan` (inference and folding through split, nothing compiled: what
``nnhal.explain`` shows) and :func:`prepare` (all of them: a prepared graph a scheduler runs)."""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field

import numpy as np

from nnhal.errors import LimitError
from nnhal.graph.graph import Graph
from nnhal.graph.tensor import TensorKind
from nnhal.optimizer.outliers import Int8Plan
from nnhal.optimizer.placement import Decision
from nnhal.options import Options
from nnhal.pipeline.allocate_and_prerun import allocate_and_prerun, release_device_graphs, release_execution
from nnhal.pipeline.calibration import calibrate
from nnhal.pipeline.inference_and_folding import infer_and_fold
from nnhal.pipeline.optimize import optimize
from nnhal.pipeline.passes import Passed, run_device_independent_passes
from nnhal.pipeline.placement import Placed, place_nodes
from nnhal.pipeline.precision_plan import CalibrationMemo, plan_precision
from nnhal.pipeline.request import Request
from nnhal.pipeline.split import Split, split
from nnhal.pipeline.timing import StageTimes
from nnhal.scheduler.scheduler import Execution, Scheduler


@contextlib.contextmanager
def out_of_memory(stage: str):
    """MemoryError in a prerun stage becomes a LimitError naming the stage."""
    try:
        yield
    except MemoryError as exc:
        raise LimitError(f"prerun ran out of memory during {stage}: {exc or 'MemoryError'}; lower "
                         f"Options.max_graph_bytes / max_fold_bytes to be refused earlier, or give the "
                         f"process more memory") from exc


@dataclass
class Planned:
    """Inference and folding through split: placed and cut, nothing compiled."""

    passed: Passed
    int8_plan: Int8Plan | None
    placed: Placed
    cut: Split


def plan(request: Request, memo: CalibrationMemo | None = None, times: StageTimes | None = None) -> Planned:
    times = times if times is not None else StageTimes()
    with out_of_memory("planning (inference, folding, placement, split)"):
        with times.stage("inference_and_folding"):
            inferred = infer_and_fold(request)
        with times.stage("passes"):
            passed = run_device_independent_passes(inferred, request.options.precision)
        with times.stage("precision_plan"):
            int8_plan = plan_precision(request, passed, memo)
        with times.stage("placement"):
            placed = place_nodes(request, passed, int8_plan)
        with times.stage("split"):
            cut = split(inferred.graph, placed, int8_plan, request.options)
    return Planned(passed, int8_plan, placed, cut)


@dataclass
class Prepared:
    """A prepared graph: what the scheduler runs, and how it came to be."""

    graph: Graph                        # the prepared graph (the subgraphs view it)
    execution: Execution                # the shared part of every run
    scheduler: Scheduler
    decisions: dict[str, Decision]
    moved_by_min_group: list[str]
    pass_report: dict[str, int]
    int8_plan: Int8Plan | None
    options: Options
    stages: StageTimes = field(default_factory=StageTimes)

    def begin(self, feeds: dict[str, np.ndarray]) -> Execution:
        """A run's execution over the prepared graph, its values holding ``feeds`` and constant outputs."""
        ex = self.execution.begin(dict(feeds))
        for name, t in self._constant_outputs:
            ex.values[name] = t.value.copy()      # the user's own: changing it must not change the graph
        return ex

    @functools.cached_property
    def _constant_outputs(self) -> list:
        """The graph outputs that are constants (folded at prepare), found once."""
        tensors = self.graph.tensors
        return [(n, tensors[n]) for n in self.graph.outputs if tensors[n].kind is TensorKind.CONSTANT]

    @functools.cached_property
    def direct(self):
        """The scheduler's blocking run of this graph as one call, decided once (issue 27; Scheduler.direct:
        ``run(execution)`` -> the outputs in graph output order, or None where the general path must run that
        execution), or None."""
        if self.scheduler.direct is None:
            return None
        return self.scheduler.direct(self.execution, list(self.graph.outputs))

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The outputs for ``feeds`` (a blocking run), in graph output order."""
        ex = self.begin(feeds)
        direct = self.direct
        if direct is not None:
            outputs = direct(ex)
            if outputs is not None:
                return outputs
        self.scheduler.run(ex, True)
        return [ex.values[n] for n in self.graph.outputs]

    def release(self) -> None:
        """post_run and release_graph on every device (every hook runs; the first failure is raised)."""
        try:
            self.scheduler.postrun(self.execution)
        finally:
            release_device_graphs(self.execution)


def prepare(request: Request, memo: CalibrationMemo | None = None, times: StageTimes | None = None) -> Prepared:
    """Every stage after import; a failure releases what this prepare allocated and built."""
    times = times if times is not None else StageTimes()
    planned = plan(request, memo, times)
    cut, placed = planned.cut, planned.placed
    with out_of_memory("calibration"), times.stage("calibration"):
        calibrate(request, cut, planned.int8_plan, memo)
    ex = Execution(cut.subgraphs, {d.name: d for d in placed.devices}, request.options, graph=cut.graph,
                   fallback=request.context.fallback)
    try:
        with times.stage("optimize"):
            optimize(ex, request.context.device_options)
        with out_of_memory("device preparation"), times.stage("allocate_and_prerun"):
            scheduler = allocate_and_prerun(ex, placed.devices)
    except BaseException:
        release_execution(ex)
        raise
    return Prepared(cut.graph, ex, scheduler, placed.decisions, placed.moved_by_min_group,
                    planned.passed.pass_report, planned.int8_plan, request.options, times)

