"""The C-style lifecycle: init, contexts, graphs, prerun, run, outputs, release.

    nnhal.init()
    ctx = nnhal.create_context("app", devices=["cpu"])
    g = nnhal.create_graph(ctx, "onnx", "model.onnx")
    nnhal.set_graph_input(g, "data", x)
    nnhal.prerun_graph(g, nnhal.Options(num_thread=2))
    nnhal.run_graph(g)
    y = nnhal.get_graph_output(g, 0)
    nnhal.postrun_graph(g); nnhal.destroy_graph(g); nnhal.release()
"""
from __future__ import annotations

import enum
import functools
import logging
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nnhal.device.device import Device
from nnhal.device.loading import device_status as device_status  # the lifecycle's init, release and status
from nnhal.device.loading import init as init
from nnhal.device.loading import init_for, require_init
from nnhal.device.loading import release as release
from nnhal.device.manager import registered_devices
from nnhal.errors import (
    DeviceError,
    InputError,
    InternalError,
    LimitError,
    ModelError,
    NnhalError,
    OptionsError,
    StateError,
    wrapped,
)
from nnhal.graph.binding import InputChecker, check_input, resolve
from nnhal.graph.derived import DerivedCache, deriving
from nnhal.graph.graph import Graph
from nnhal.optimizer.outliers import Int8Plan
from nnhal.optimizer.placement import Decision
from nnhal.optimizer.report import PlacementReport, build_report
from nnhal.options import Options
from nnhal.pipeline.allocate_and_prerun import release_device_graphs
from nnhal.pipeline.context import Context, make_context
from nnhal.pipeline.import_model import ModelSource, import_model
from nnhal.pipeline.mixed import prepare_mixed
from nnhal.pipeline.prepare import Prepared, plan, prepare
from nnhal.pipeline.request import Request
from nnhal.pipeline.timing import StageTime, StageTimes
from nnhal.profiling import Profile, measure
from nnhal.scheduler.gcpause import gc_paused
from nnhal.scheduler.locks import ReadWriteLock
from nnhal.scheduler.scheduler import Execution, Scheduler

log = logging.getLogger("nnhal")


def _typed(fn):
    """The public API's last safety net: an exception that is no NnhalError (a gap in nnhal's own
    checks) becomes an InternalError naming the call, a MemoryError a LimitError; both chained."""
    stage = fn.__name__

    guard = wrapped(lambda exc: InternalError(f"{stage} failed unexpectedly ({type(exc).__name__}: {exc}); this "
                                              f"is a gap in nnhal's checks, please report it with the model"),
                    memory=lambda exc: LimitError(f"{stage} ran out of memory: {exc or 'MemoryError'}"))

    @functools.wraps(fn)
    def call(*args, **kwargs):
        # NOTE: the guard's __exit__ only when something was raised: a Session.run's path makes no
        # __enter__/__exit__ calls (the guard is stateless: shared by every call and thread)
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            guard.__exit__(type(exc), exc, exc.__traceback__)    # raises the typed error, or leaves exc as it is
            raise
    return call


@_typed
def create_context(name: str = "default", devices: list[str] | None = None,
                   device_options: dict[str, dict] | None = None, strict: bool = False,
                   pins: dict[str, str] | None = None, deny: dict[str, list[str]] | None = None) -> Context:
    """A context over ``devices`` (names, in priority order). Unknown names raise DeviceError."""
    init_for(devices)
    return make_context(name, devices, device_options, strict, pins, deny)


# ----------------------------------------------------------------------- graph
class GraphState(enum.Enum):
    CREATED = "created"
    PREPARED = "prepared"
    RUNNING = "running"
    DONE = "done"
    DESTROYED = "destroyed"


ShapeKey = tuple   # the input shapes, in graph input order: what a cached prepared entry serves


@dataclass
class ShapeEntry:
    """One prepared input shape (issue 27): what the prepare pipeline built for it and what a report needs.

    Each entry holds its own prepared graph (folded constants, device graphs, arenas); the values derived
    from the weights alone (packed GEMM panels, merged projection weights) are shared through the handle's
    DerivedCache, marked used by ``token`` (docs/concurrency.md#input-shapes)."""

    prepared: Prepared
    shapes: dict[str, tuple]
    stage_times: list[StageTime]
    mixed_report: Any = None
    live: bool = True       # post_run not called yet
    # the scheduler's run of this entry as one call (Prepared.direct), or None: decided at prepare (issue 27)
    direct: Any = None
    token: object = None    # this entry's prepare in the handle's DerivedCache (released with the entry)


@dataclass
class GraphHandle:
    """A model in a context: its imported graph and, after prerun, its execution."""

    context: Context
    graph: Graph
    state: GraphState = GraphState.CREATED
    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    options: Options | None = None
    execution: Execution | None = None
    scheduler: Scheduler | None = None
    placement: dict[str, Decision] = field(default_factory=dict)
    prepared_shapes: dict[str, tuple] = field(default_factory=dict)
    prepared_graph: Graph | None = None
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    pass_report: dict[str, int] = field(default_factory=dict)
    moved_by_min_group: list[str] = field(default_factory=list)
    mixed_report: Any = None
    int8_plan: Int8Plan | None = None       # under int8/uint8: what each node does and why (optimizer/outliers.py)
    prepared: Prepared | None = None        # what the prepare pipeline built (nnhal.pipeline)
    import_times: list[StageTime] = field(default_factory=list)    # create_graph's stage
    stage_times: list[StageTime] = field(default_factory=list)     # every stage of the last prerun
    run: Execution | None = None            # the run started by run_graph (its values hold the outputs)
    # runs (Session.run from any thread) share the prepared graph; preparing it again excludes them
    lock: ReadWriteLock = field(default_factory=ReadWriteLock, repr=False)
    # the prepared input shapes, least recently used first (issue 27); the handle's fields above describe
    # the entry prepared (or selected by run_graph) last. Changed only under the write lock, except
    # execute's move_to_end under the read lock (one C call: atomic under the GIL)
    entries: OrderedDict = field(default_factory=OrderedDict, repr=False)
    entry_options: Options | None = None    # the Options object the entries were prepared with
    # the weight-derived values every entry shares (nnhal.graph.derived); items live while an entry uses them
    derived: DerivedCache = field(default_factory=DerivedCache, repr=False)
    checker: InputChecker = field(init=False, repr=False)     # the feeds' checks, derived once from the model

    def __post_init__(self) -> None:
        self.checker = InputChecker(self.graph)

    @property
    def input_names(self) -> list[str]:
        return list(self.graph.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.graph.outputs)


@_typed
def create_graph(context: Context, model_format: str, model: Any, base_dir: str | None = None,
                 compiled_cache: str | os.PathLike | None = None) -> GraphHandle:
    """Import a model ('onnx': path, bytes or onnx.ModelProto) into a context.

    External-data tensors resolve only inside one folder: the model file's own, or ``base_dir``,
    which bytes and a ModelProto with external data must give (docs/untrusted-models.md).
    ``compiled_cache``: a directory of the user's own where the imported graph is kept, keyed by the
    model's hash and nnhal's version, and loaded from on later imports (nnhal.serializer.cache).
    """
    if not isinstance(context, Context):
        raise StateError(f"create_graph needs a context from create_context(), got {type(context).__name__}")
    if model_format != "onnx":
        raise ModelError(f"model format '{model_format}' is not supported; nnhal reads 'onnx'")
    times = StageTimes()
    with times.stage("import_model"):
        graph = import_model(ModelSource(model, base_dir, compiled_cache))
    return GraphHandle(context, graph, import_times=times.times)


def _alive(g: GraphHandle) -> None:
    if not isinstance(g, GraphHandle):
        raise StateError(f"expected a graph from create_graph(), got {type(g).__name__}")
    if g.state is GraphState.DESTROYED:
        raise StateError("the graph was destroyed; create it again with create_graph()")


@_typed
def set_graph_input(g: GraphHandle, key: str | int, value: Any) -> None:
    """Bind an input by name or index; its dtype and shape are checked against the model."""
    _alive(g)
    if g.state is GraphState.RUNNING:
        raise StateError("cannot set an input while the graph is running; call wait_graph() first")
    name, array = check_input(g.graph, key, value)
    g.inputs[name] = array


@_typed
def prerun_graph(g: GraphHandle, options: Options | None = None) -> None:
    """Infer shapes, fold constants, place, split, set precision and prepare every subgraph.

    A failure releases everything this prerun allocated and built, on every device."""
    _alive(g)
    if g.state is GraphState.RUNNING:
        raise StateError("the graph is running; call wait_graph() before prerun_graph()")
    if options is not None and not isinstance(options, Options):
        raise OptionsError(f"prerun_graph needs an nnhal.Options, got {type(options).__name__}")
    with g.lock.write():
        _prerun_locked(g, options or Options(), keep=False)


def _shape_key(g: GraphHandle, arrays: dict[str, np.ndarray]) -> ShapeKey | None:
    """The cache key of ``arrays``: their shapes in graph input order; None when an input is missing."""
    key = []
    for name in g.graph.inputs:     # NOTE: once per run: a loop, no generator object
        array = arrays.get(name)
        if array is None:
            return None
        key.append(array.shape)
    return tuple(key)


@gc_paused()
def _prerun_locked(g: GraphHandle, options: Options, keep: bool) -> ShapeEntry:
    """The prepare pipeline (nnhal.pipeline) over the bound inputs; the handle then holds what it prepared.

    ``keep``: the entries of other input shapes stay cached (up to ``options.shape_cache``, the least
    recently used evicted first) when they were prepared with this same ``options`` object; otherwise
    every entry is released first (prerun_graph: prepared anew, as documented). Called under the write
    lock: no run is in flight on any entry, so an evicted entry is released at once."""
    key = _shape_key(g, g.inputs)
    if not (keep and options is g.entry_options and g.state in _RUNNABLE) or key in g.entries:
        _drop_entries(g)
    while len(g.entries) >= options.shape_cache:
        _release_entries(g, [g.entries.popitem(last=False)[1]], "evicting a prepared input shape")
    request = Request(g.graph, g.inputs, g.context, options)
    mixed_report = None
    token = object()
    try:
        with deriving(g.derived, token):
            if options.precision == "mixed":
                prepared, mixed_report = prepare_mixed(request)
            else:
                prepared = prepare(request)
    except BaseException:
        g.derived.release(token)
        raise
    entry = ShapeEntry(prepared, {n: a.shape for n, a in g.inputs.items()},
                       [*g.import_times, *prepared.stages.times], mixed_report, token=token)
    if list(prepared.graph.outputs) == list(g.graph.outputs):   # the direct run returns the prepared graph's
        entry.direct = prepared.direct
    g.entries[key] = entry
    g.entry_options = options
    log.debug("prepared the graph for input shapes %s (%d of %d cached)", key, len(g.entries), options.shape_cache)
    _select(g, entry)
    return entry


def _select(g: GraphHandle, entry: ShapeEntry) -> None:
    """Make ``entry`` the handle's prepared state (what run_graph, report and profile use)."""
    prepared = entry.prepared
    g.prepared, g.mixed_report = prepared, entry.mixed_report
    for name in ("execution", "scheduler", "pass_report", "moved_by_min_group", "int8_plan", "options"):
        setattr(g, name, getattr(prepared, name))
    g.placement, g.prepared_graph = prepared.decisions, prepared.graph
    g.stage_times = entry.stage_times
    g.prepared_shapes = entry.shapes
    g.outputs, g.run = {}, None
    g.state = GraphState.PREPARED


def _entry_postrun(entry: ShapeEntry) -> None:
    """post_run and allocator.release of one entry, once."""
    if entry.live:
        entry.live = False
        entry.prepared.scheduler.postrun(entry.prepared.execution)


def _entry_release(entry: ShapeEntry) -> None:
    """release_graph for what each device's pre_run built for one entry (idempotent)."""
    release_device_graphs(entry.prepared.execution)


def _release_entries(g: GraphHandle, entries: list[ShapeEntry], what: str) -> None:
    """post_run (if not yet) and release_graph of ``entries``, taken out of the cache by the caller.

    Called under the write lock: no run is in flight on any entry (execute holds the read lock for a run).
    Every hook runs even when one raises; then one DeviceError names each that failed."""
    failures: list[NnhalError] = []
    for entry in entries:
        if entry.prepared is g.prepared:     # the handle's own: no longer prepared
            g.execution = g.prepared = None
        for step in (_entry_postrun, _entry_release):
            try:
                step(entry)
            except NnhalError as exc:
                failures.append(exc)
        g.derived.release(entry.token)
    _raise_failures(what, failures)


def _raise_failures(what: str, failures: list[NnhalError]) -> None:
    if failures:
        if len(failures) == 1:
            raise failures[0]
        raise DeviceError(f"{what}: " + "; ".join(str(f) for f in failures)) from failures[0]


def _drop_entries(g: GraphHandle) -> None:
    """Release every cached entry; the handle is then not prepared."""
    entries = list(g.entries.values())
    g.entries.clear()
    g.entry_options = None
    if g.state is not GraphState.RUNNING:
        g.state = GraphState.CREATED
    _release_entries(g, entries, "releasing the prepared input shapes")


@_typed
def report(g: GraphHandle) -> PlacementReport:
    """What ran where after prerun: placement with reasons, subgraphs, boundaries, fallbacks."""
    _alive(g)
    if g.execution is None or g.prepared_graph is None:
        raise StateError("no placement yet: call prerun_graph() first (or nnhal.explain() before compiling)")
    return build_report(g.prepared_graph, g.placement, g.execution.subgraphs, g.moved_by_min_group,
                        g.options.min_group_size, g.execution.report, StageTimes(g.stage_times).pairs())


@_typed
def explain(model: Any, devices: list[str] | None = None, precision: str = "fp32",
            inputs: dict[str, Any] | None = None, min_group_size: int = 1, pins: dict[str, str] | None = None,
            deny: dict[str, list[str]] | None = None, strict: bool = False) -> PlacementReport:
    """The placement report of a model before anything is compiled.

    ``inputs`` maps input names to arrays (or shapes) for models with dynamic dims.
    """
    ctx = create_context("explain", devices, None, strict, pins, deny)
    g = create_graph(ctx, "onnx", model)
    for name, value in (inputs or {}).items():
        if isinstance(value, (tuple, list)):
            value = np.zeros(value, dtype=g.graph.tensors[resolve(g.graph.inputs, name, "input")].dtype)
        set_graph_input(g, name, value)
    options = Options(precision=precision, min_group_size=min_group_size, strict=strict)
    times = StageTimes(list(g.import_times))
    planned = plan(Request(g.graph, g.inputs, ctx, options), times=times)
    return build_report(planned.cut.graph, planned.placed.decisions, planned.cut.subgraphs,
                        planned.placed.moved_by_min_group, min_group_size, stages=times.pairs())


_RUNNABLE = (GraphState.PREPARED, GraphState.DONE, GraphState.RUNNING)


def _prepared_for(g: GraphHandle, feeds: dict[str, np.ndarray]) -> ShapeEntry | None:
    """The cached prepared entry that serves ``feeds`` as they are (their shapes), or None.

    Under the read lock: marks the entry most recently used (OrderedDict.move_to_end, one C call)."""
    if g.state not in _RUNNABLE:
        return None
    key = _shape_key(g, feeds)
    entry = g.entries.get(key)
    if entry is None or not entry.live:
        return None
    try:
        g.entries.move_to_end(key)
    except KeyError:      # NOTE: cannot happen under the read lock (writers are excluded); kept harmless
        pass
    return entry


@_typed
def execute(g: GraphHandle, feeds: dict[str, Any] | list[Any], options: Options | None = None) -> list[np.ndarray]:
    """Outputs for ``feeds`` (name or index -> array, or arrays in input order), in graph output order.

    Re-entrant: runs from many threads share the prepared graph, each with its own values; a graph not
    yet prepared for these input shapes is prepared first, with ``options``, under the write lock; up to
    ``Options.shape_cache`` prepared input shapes are kept (least recently used evicted), so a run whose
    shapes were prepared before takes only the read lock (docs/concurrency.md#input-shapes)."""
    _alive(g)
    check = g.checker
    # NOTE: the run path: every feed already as the model gives it (Session.run's common case), one call
    arrays = check.exact(feeds) if type(feeds) is dict else None
    if arrays is None:
        arrays = _checked(g, feeds)
    g.lock.acquire_read()
    try:
        entry = _prepared_for(g, arrays)
    except BaseException:
        g.lock.release_read()   # a failing check must not keep the read lock (close() would wait forever)
        raise
    if entry is None:
        g.lock.release_read()
        with g.lock.write():
            entry = _prepared_for(g, arrays)
            if entry is None:
                if g.entries:
                    log.info("new input shapes; preparing the graph for them (%d shape(s) cached)", len(g.entries))
                g.inputs = dict(arrays)
                entry = _prerun_locked(g, options or g.entry_options or Options(), keep=True)
            # NOTE: this run stays under the write lock: going back to the read lock could find the entry
            # evicted by another thread's new shape (more shapes in flight than shape_cache) and loop
            return _run_entry(g, entry, arrays)
    try:
        return _run_entry(g, entry, arrays)
    finally:
        g.lock.release_read()


def _checked(g: GraphHandle, feeds: Any) -> dict[str, np.ndarray]:
    """The feeds as the graph's input name -> a checked array; InputError naming what is wrong."""
    if isinstance(feeds, dict):
        items = feeds.items()
    elif isinstance(feeds, (list, tuple)):
        items = enumerate(feeds)
    else:
        raise InputError(f"feeds must be a dict of input name -> array or a list of arrays in input order, "
                         f"got {type(feeds).__name__}")
    check = g.checker
    arrays = {}
    for key, value in items:
        name, array = check(key, value)
        arrays[name] = array
    # every key resolved to one of the graph's inputs: as many names as inputs means none is missing
    missing = [] if len(arrays) == len(check.names) else [n for n in check.names if n not in arrays]
    if missing:
        raise InputError(f"inputs not given: {missing} (the graph's inputs: {g.graph.inputs})")
    return arrays


def _run_entry(g: GraphHandle, entry: ShapeEntry, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    """One blocking run on ``entry`` (its own prepared graph, never the handle's: another may be selected)."""
    prepared = entry.prepared
    ex = prepared.begin(arrays)
    direct = entry.direct
    if direct is not None:
        outputs = direct(ex)
        if outputs is not None:
            return outputs
    prepared.scheduler.run(ex, True)
    return [ex.values[n] for n in g.graph.outputs]


@_typed
def run_graph(g: GraphHandle, block: bool = True) -> None:
    """Run the prepared graph; with block=False, start it and return (see wait_graph)."""
    _alive(g)
    if g.state is GraphState.CREATED:
        raise StateError("run_graph() before prerun_graph(): prepare the graph first")
    if g.state is GraphState.RUNNING:
        raise StateError("the graph is already running; call wait_graph() first")
    missing = [n for n in g.graph.inputs if n not in g.inputs]
    if missing:
        raise InputError(f"inputs not set: {missing}; call set_graph_input() for each")
    if g.prepared is None or g.prepared_shapes != {n: a.shape for n, a in g.inputs.items()}:
        with g.lock.write():
            _select_or_prepare(g)
    ex = g.prepared.begin(g.inputs)
    g.run = ex
    g.outputs = {}
    g.state = GraphState.RUNNING
    try:
        g.scheduler.run(ex, block)
    except BaseException:
        g.state = GraphState.PREPARED
        raise
    if block:
        _finish(g)


def _select_or_prepare(g: GraphHandle) -> None:
    """run_graph with inputs of other shapes than the selected entry's: select their cached entry, or
    prepare one (kept beside the others), with the options of the last prerun."""
    entry = _prepared_for(g, g.inputs)
    if entry is not None:
        _select(g, entry)
        return
    log.info("input shapes changed since prerun; preparing the graph for them")
    _prerun_locked(g, g.entry_options or g.options or Options(), keep=True)


@_typed
def profile(g: GraphHandle, runs: int = 10, warmup: int = 1) -> Profile:
    """Run the prepared graph (inputs set) ``warmup`` + ``runs`` times and return where the time of the
    timed runs went, per subgraph and per node (see nnhal/profiling.py). Outputs of the last run are
    available afterwards as after run_graph."""
    _alive(g)
    if not isinstance(runs, int) or runs < 1 or not isinstance(warmup, int) or warmup < 0:
        raise InputError(f"profile() needs runs >= 1 and warmup >= 0; got runs={runs!r}, warmup={warmup!r}")
    if g.state is GraphState.CREATED:
        raise StateError("profile() before prerun_graph(): prepare the graph first")
    with g.lock.write():            # timing switches live in the shared graph: no other run meanwhile
        return measure(lambda: run_graph(g), lambda: g.execution, runs, warmup, StageTimes(g.stage_times).pairs())


@_typed
def wait_graph(g: GraphHandle, timeout: float | None = None) -> bool:
    """Wait for a run started with block=False; True when it has finished."""
    _alive(g)
    if g.state is not GraphState.RUNNING:
        return True
    try:
        done = g.scheduler.wait(g.run, timeout)
    except BaseException:
        g.state = GraphState.PREPARED
        raise
    if done:
        _finish(g)
    return done


def _finish(g: GraphHandle) -> None:
    g.outputs = {n: g.run.values[n] for n in g.graph.outputs}
    g.run = None
    g.state = GraphState.DONE


@_typed
def get_graph_output(g: GraphHandle, key: str | int) -> np.ndarray:
    """An output of the last run, by name or index."""
    _alive(g)
    if g.state is GraphState.RUNNING:
        raise StateError("the run has not finished; call wait_graph() first")
    if g.state is not GraphState.DONE:
        raise StateError("no outputs yet: call run_graph() after prerun_graph()")
    return g.outputs[resolve(g.graph.outputs, key, "output")]


@_typed
def postrun_graph(g: GraphHandle) -> None:
    """Release run state (post_run, allocator.release); prerun_graph may follow.

    Every hook runs even when one raises; then one DeviceError names each device and hook that failed."""
    _alive(g)
    if g.state is GraphState.RUNNING:
        raise StateError("the graph is running; call wait_graph() first")
    with g.lock.write():
        _postrun(g)


def _postrun(g: GraphHandle) -> None:
    """post_run every cached entry; their compiled graphs are released by the next prerun or destroy."""
    g.state = GraphState.CREATED
    failures: list[NnhalError] = []
    for entry in g.entries.values():
        try:
            _entry_postrun(entry)
        except NnhalError as exc:
            failures.append(exc)
    _raise_failures("postrun_graph", failures)


@_typed
def destroy_graph(g: GraphHandle) -> None:
    """Free everything the graph holds; the handle cannot be used afterwards.

    Every cleanup hook runs even when one raises; the handle is destroyed either way, and then one
    DeviceError names each device and hook that failed."""
    _alive(g)
    failures: list[NnhalError] = []
    if g.state is GraphState.RUNNING:
        try:
            wait_graph(g)
        except NnhalError as exc:
            failures.append(exc)
    with g.lock.write():            # waits for runs of other threads to end
        try:
            _drop_entries(g)          # post_run and release_graph of every cached input shape
        except NnhalError as exc:
            failures.append(exc)
        g.inputs.clear()
        g.outputs.clear()
        g.run = None
        g.state = GraphState.DESTROYED
    _raise_failures("destroy_graph", failures)


def devices() -> list[Device]:
    """Registered devices, in registration order."""
    require_init()
    return registered_devices()
