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
import importlib
import importlib.util
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from nnhal.device.device import API_VERSION, Device
from nnhal.device.discovery import discover as discover_plugins
from nnhal.device.discovery import load_plugin
from nnhal.device.manager import (
    BUILT_IN,
    FALLBACK_DEVICE,
    DeviceStatus,
    clear_unavailable,
    find_device,
    mark_unavailable,
    register_device,
    registered_devices,
    unregister_device,
)
from nnhal.device.manager import device_status as manager_status
from nnhal.errors import (
    DeviceError,
    InputError,
    InternalError,
    LimitError,
    ModelError,
    NnhalError,
    OptionsError,
    RegistryError,
    StateError,
    did_you_mean,
    wrapped,
)
from nnhal.graph.graph import Graph
from nnhal.optimizer.outliers import Int8Plan
from nnhal.optimizer.placement import Decision
from nnhal.optimizer.report import PlacementReport, build_report
from nnhal.options import Options, validate_device_options
from nnhal.pipeline.allocate_and_prerun import release_device_graphs
from nnhal.pipeline.context import Context
from nnhal.pipeline.import_model import ModelSource, import_model
from nnhal.pipeline.inference_and_folding import Request
from nnhal.pipeline.mixed import prepare_mixed
from nnhal.pipeline.prepare import Prepared, plan, prepare
from nnhal.pipeline.timing import StageTime, StageTimes
from nnhal.profiling import NodeTime, Profile, SubgraphTime
from nnhal.scheduler.gcpause import gc_paused
from nnhal.scheduler.locks import ReadWriteLock
from nnhal.scheduler.scheduler import Execution, Scheduler

log = logging.getLogger("nnhal")
_lock = threading.RLock()
_registered: list[tuple[str, Callable[[], None]]] = []   # (device, how to unregister it), in init() order
_initialised = False          # every device registered (init() without a device list)
_attempted: set[str] = set()   # built-in registry entries init() has tried to register
_plugins_tried = False         # out-of-tree devices looked for


def _typed(fn):
    """The public API's last safety net: an exception that is no NnhalError (a gap in nnhal's own
    checks) becomes an InternalError naming the call, a MemoryError a LimitError; both chained."""
    stage = fn.__name__

    guard = wrapped(lambda exc: InternalError(f"{stage} failed unexpectedly ({type(exc).__name__}: {exc}); this "
                                              f"is a gap in nnhal's checks, please report it with the model"),
                    memory=lambda exc: LimitError(f"{stage} ran out of memory: {exc or 'MemoryError'}"))

    @functools.wraps(fn)
    def call(*args, **kwargs):
        with guard:     # stateless: shared by every call and thread
            return fn(*args, **kwargs)
    return call


# ------------------------------------------------------------------ init/release
def init(devices: Sequence[str] | None = None) -> None:
    """Register the devices of the generated registry, then the out-of-tree ones (idempotent).

    A device that cannot be registered (a missing package, an import error, a
    plugin's API version, an init hook that raises) is recorded as unavailable
    with the reason (see ``nnhal devices``); the others are registered.

    ``devices`` (names) registers only those built-in devices and the fallback for now, and looks for
    plugins only when a name is not built in; a later ``init()`` registers the rest. Sessions and
    contexts pass the devices they name: a CPU-only session then never opens a GPU adapter (the webgpu
    device's costs ~95 MB and ~0.7 s on lavapipe).
    """
    global _initialised, _plugins_tried
    with _lock:
        if _initialised:
            return
        try:
            from nnhal import registry
        except ImportError as exc:
            raise RegistryError("nnhal.registry is missing: the package was not built. Install it with "
                                "'pip install .' (or 'pip install -e .') so CMake renders the registry") from exc
        wanted = None if devices is None else {*devices, FALLBACK_DEVICE}
        for entry in registry.DEVICES:
            if entry.name not in _attempted and (wanted is None or entry.name in wanted):
                _attempted.add(entry.name)
                _register_builtin(entry)
        if not _plugins_tried and (wanted is None or wanted - {e.name for e in registry.DEVICES}):
            _plugins_tried = True
            for plugin in discover_plugins():
                _register_plugin(plugin)
        _initialised = wanted is None


def _init_for(devices: Any) -> None:
    """init() for a context over ``devices``: only those (and the fallback) when it is a list of names;
    everything otherwise (the caller then reports what is wrong with it)."""
    if devices is None:
        init([])
    elif isinstance(devices, (list, tuple)) and all(isinstance(d, str) for d in devices):
        init(devices)
    else:
        init()


def _register_builtin(entry: Any) -> None:
    """Check an enabled registry entry's packages, import its module and call its register function."""
    missing = [p for p in entry.packages if importlib.util.find_spec(p) is None]
    if missing:
        mark_unavailable(entry.name, BUILT_IN, API_VERSION,
                         f"needs the Python package(s) {', '.join(missing)}, which this Python cannot import: "
                         f"install them, or switch the device off with 'nnhal registry --disable {entry.name}'")
        return
    try:
        module = importlib.import_module(entry.module)
        getattr(module, entry.register)()
    except Exception as exc:
        mark_unavailable(entry.name, BUILT_IN, API_VERSION, f"{entry.module}.{entry.register}() failed: "
                         f"{type(exc).__name__}: {exc}")
        log.warning("nnhal: device '%s' is unavailable: %s", entry.name, exc)
        return
    if entry.name not in {d.name for d in registered_devices()}:
        mark_unavailable(entry.name, BUILT_IN, API_VERSION,
                         f"{entry.module}.{entry.register}() did not register a device named '{entry.name}'")
        return
    _registered.append((entry.name, getattr(module, entry.unregister)))


def _register_plugin(plugin: Any) -> None:
    """Load an out-of-tree device and register it; on any failure record why it is unavailable."""
    loaded = load_plugin(plugin)
    reason = loaded.reason
    if loaded.device is not None:
        try:
            register_device(loaded.device, origin=plugin.origin, api=loaded.api)
        except RegistryError as exc:
            reason = str(exc)
    if reason:
        mark_unavailable(plugin.name, plugin.origin, loaded.api, reason)
        log.warning("nnhal: device '%s' (%s) is unavailable: %s", plugin.name, plugin.origin, reason)
        return
    _registered.append((plugin.name, lambda name=plugin.name: unregister_device(name)))


def release() -> None:
    """Unregister the devices init() registered, in reverse order, and forget the unavailable ones."""
    global _initialised, _plugins_tried
    with _lock:
        while _registered:
            _, unregister = _registered.pop()
            unregister()
        clear_unavailable()
        _attempted.clear()
        _initialised = _plugins_tried = False


def device_status() -> list[DeviceStatus]:
    """Every device init() saw, registered or unavailable (with the reason), and those registered since."""
    _require_init()
    return manager_status()


def _require_init() -> None:
    if not _initialised:
        init()


# --------------------------------------------------------------------- context
def _names(value: Any, what: str) -> list[str]:
    """A list of names from a list or tuple of str; a bare string or anything else is an OptionsError."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)) \
            or not all(isinstance(v, str) and v for v in value):
        raise OptionsError(f"{what} must be a list of names (e.g. ['a', 'b']), got {value!r}")
    return list(value)


@_typed
def create_context(name: str = "default", devices: list[str] | None = None,
                   device_options: dict[str, dict] | None = None, strict: bool = False,
                   pins: dict[str, str] | None = None, deny: dict[str, list[str]] | None = None) -> Context:
    """A context over ``devices`` (names, in priority order). Unknown names raise DeviceError."""
    _init_for(devices)
    if not isinstance(name, str):
        raise OptionsError(f"the context name must be a str, got {name!r}")
    if not isinstance(strict, bool):
        raise OptionsError(f"strict must be True or False, got {strict!r}")
    names = _names(devices, "devices") if devices is not None else [FALLBACK_DEVICE]
    if not names:
        raise OptionsError("devices is empty; name at least one device (e.g. ['{FALLBACK_DEVICE}'])")
    for n in names:
        try:
            find_device(n)
        except DeviceError:
            init()              # every device registered, so the error lists them all
            find_device(n)
    if len(set(names)) != len(names):
        raise DeviceError(f"device list {names} names a device twice")
    if not strict and FALLBACK_DEVICE not in names:
        names.append(FALLBACK_DEVICE)
    if device_options is not None and not isinstance(device_options, dict):
        raise OptionsError(f"device_options must be a dict of device name -> dict of options, got {device_options!r}")
    device_options = dict(device_options or {})
    for dev, opts in device_options.items():
        if dev not in names:
            raise DeviceError(f"device_options names '{dev}', which is not in the context's devices {names}")
        if opts is not None and not isinstance(opts, dict):
            raise OptionsError(f"device_options['{dev}'] must be a dict of options, got {opts!r}")
    typed = {n: validate_device_options(n, find_device(n).describe().options, device_options.get(n)) for n in names}
    if pins is not None and not isinstance(pins, dict):
        raise OptionsError(f"pins must be a dict of node name -> device name, got {pins!r}")
    for node, target in (pins or {}).items():
        if not isinstance(node, str) or not isinstance(target, str):
            raise OptionsError(f"pins must map node names to device names (str -> str), got {node!r}: {target!r}")
        if target not in names:
            raise DeviceError(f"the pin of node '{node}' names device '{target}', which is not in the context's "
                              f"devices {names}")
    if deny is not None and not isinstance(deny, dict):
        raise OptionsError(f"deny must be a dict of node name -> list of device names, got {deny!r}")
    denied = {}
    for node, targets in (deny or {}).items():
        if not isinstance(node, str):
            raise OptionsError(f"deny must be keyed by node names (str), got {node!r}")
        denied[node] = _names(targets, f"deny['{node}']")
        for target in denied[node]:
            if target not in names:
                raise DeviceError(f"deny['{node}'] names device '{target}', which is not in the context's "
                                  f"devices {names}")
    return Context(name, names, typed, strict, dict(pins or {}), denied)


# ----------------------------------------------------------------------- graph
class GraphState(enum.Enum):
    CREATED = "created"
    PREPARED = "prepared"
    RUNNING = "running"
    DONE = "done"
    DESTROYED = "destroyed"


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
    which bytes and a ModelProto with external data must give (see README, "Untrusted models").
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


def _resolve(names: list[str], key: str | int, what: str) -> str:
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        if not 0 <= key < len(names):
            raise InputError(f"{what} index {key} is out of range; the graph has {len(names)} {what}s: {names}")
        return names[int(key)]
    if key not in names:
        raise InputError(f"the graph has no {what} named '{key}' ({what}s: {names}){did_you_mean(key, names)}")
    return key


def check_input(g: GraphHandle, key: str | int, value: Any) -> tuple[str, np.ndarray]:
    """The input's name and ``value`` as a C-contiguous array; its dtype and shape checked against the model."""
    name = _resolve(g.graph.inputs, key, "input")
    t = g.graph.tensors[name]
    try:
        array = np.asarray(value)
    except Exception as exc:
        raise InputError(f"input '{name}': cannot make an array of a {type(value).__name__}: {exc}") from exc
    if t.dtype is not None and array.dtype != t.dtype:
        raise InputError(f"input '{name}' expects dtype {t.dtype}, got {array.dtype}; convert it with "
                         f".astype(np.{t.dtype})")
    if t.shape is not None:
        if array.ndim != len(t.shape) or any(d is not None and d != s for d, s in zip(t.shape, array.shape)):
            want = "x".join("?" if d is None else str(d) for d in t.shape) or "scalar"
            raise InputError(f"input '{name}' expects shape [{want}], got {list(array.shape)}")
    return name, np.require(array, requirements="C")


@_typed
def set_graph_input(g: GraphHandle, key: str | int, value: Any) -> None:
    """Bind an input by name or index; its dtype and shape are checked against the model."""
    _alive(g)
    if g.state is GraphState.RUNNING:
        raise StateError("cannot set an input while the graph is running; call wait_graph() first")
    name, array = check_input(g, key, value)
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
        _prerun_locked(g, options or Options())


@gc_paused()
def _prerun_locked(g: GraphHandle, options: Options) -> None:
    """The prepare pipeline (nnhal.pipeline) over the bound inputs; the handle then holds what it prepared."""
    if g.state in (GraphState.PREPARED, GraphState.DONE):
        _postrun(g)
    _release_device_graphs(g)
    request = Request(g.graph, g.inputs, g.context, options)
    if options.precision == "mixed":
        prepared, g.mixed_report = prepare_mixed(request)
    else:
        prepared = prepare(request)
    g.prepared = prepared
    for name in ("execution", "scheduler", "pass_report", "moved_by_min_group", "int8_plan", "options"):
        setattr(g, name, getattr(prepared, name))
    g.placement, g.prepared_graph = prepared.decisions, prepared.graph
    g.stage_times = [*g.import_times, *prepared.stages.times]
    g.prepared_shapes = {n: a.shape for n, a in g.inputs.items()}
    g.outputs, g.run = {}, None
    g.state = GraphState.PREPARED


@_typed
def report(g: GraphHandle) -> PlacementReport:
    """What ran where after prerun: placement with reasons, subgraphs, boundaries, fallbacks."""
    _alive(g)
    if g.execution is None or g.prepared_graph is None:
        raise StateError("no placement yet: call prerun_graph() first (or nnhal.explain() before compiling)")
    return build_report(g.prepared_graph, g.placement, g.execution.subgraphs, g.moved_by_min_group,
                        g.options.min_group_size, g.execution.report, _pairs(g.stage_times))


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
            value = np.zeros(value, dtype=g.graph.tensors[_resolve(g.graph.inputs, name, "input")].dtype)
        set_graph_input(g, name, value)
    options = Options(precision=precision, min_group_size=min_group_size, strict=strict)
    times = StageTimes(list(g.import_times))
    planned = plan(Request(g.graph, g.inputs, ctx, options), times=times)
    return build_report(planned.cut.graph, planned.placed.decisions, planned.cut.subgraphs,
                        planned.placed.moved_by_min_group, min_group_size, stages=times.pairs())


def _pairs(times: list[StageTime]) -> list[tuple[str, float]]:
    return [(t.stage, t.seconds) for t in times]


def _prepared_for(g: GraphHandle, feeds: dict[str, np.ndarray]) -> bool:
    """Whether the prepared graph serves ``feeds`` as they are (same shapes as at prerun)."""
    return g.state in (GraphState.PREPARED, GraphState.DONE, GraphState.RUNNING) and g.execution is not None \
        and all(g.prepared_shapes.get(n) == a.shape for n, a in feeds.items())


def _begin(g: GraphHandle, feeds: dict[str, np.ndarray]) -> Execution:
    """A run's execution over the prepared graph, its value store holding ``feeds`` and constant outputs."""
    return g.prepared.begin(feeds)


@_typed
def execute(g: GraphHandle, feeds: dict[str, Any] | list[Any], options: Options | None = None) -> list[np.ndarray]:
    """Outputs for ``feeds`` (name or index -> array, or arrays in input order), in graph output order.

    Re-entrant: runs from many threads share the prepared graph, each with its own values; a graph not
    yet prepared, or prepared for other input shapes, is prepared (again) first, with ``options``."""
    _alive(g)
    if isinstance(feeds, dict):
        items = list(feeds.items())
    elif isinstance(feeds, (list, tuple)):
        items = list(enumerate(feeds))
    else:
        raise InputError(f"feeds must be a dict of input name -> array or a list of arrays in input order, "
                         f"got {type(feeds).__name__}")
    arrays = dict(check_input(g, key, value) for key, value in items)
    missing = [n for n in g.graph.inputs if n not in arrays]
    if missing:
        raise InputError(f"inputs not given: {missing} (the graph's inputs: {g.graph.inputs})")
    while True:
        g.lock.acquire_read()
        if _prepared_for(g, arrays):
            break
        g.lock.release_read()
        with g.lock.write():
            if not _prepared_for(g, arrays):
                if g.execution is not None:
                    log.info("input shapes changed since prerun; preparing the graph again")
                g.inputs = dict(arrays)
                _prerun_locked(g, options or g.options or Options())
    try:
        ex = _begin(g, arrays)
        g.scheduler.run(ex, True)
        return [ex.values[n] for n in g.graph.outputs]
    finally:
        g.lock.release_read()


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
    if not _prepared_for(g, g.inputs):
        log.info("input shapes changed since prerun; preparing the graph again")
        prerun_graph(g, g.options)
    ex = _begin(g, g.inputs)
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
        return _profile(g, runs, warmup)


def _profile(g: GraphHandle, runs: int, warmup: int) -> Profile:
    for _ in range(warmup):
        run_graph(g)
    ex = g.execution
    ex.timings = {}             # the scheduler adds every subgraph's wall time
    for sg in ex.subgraphs:
        _device_profile(ex, sg, True)
    timed: dict[int, list] = {}
    try:
        t0 = time.perf_counter()
        for _ in range(runs):
            run_graph(g)
        wall = time.perf_counter() - t0
    finally:
        ex = g.execution     # a changed input shape prepares again: read what actually ran
        seconds, ex.timings = ex.timings or {}, None
        for sg in ex.subgraphs:
            timed[sg.index] = _device_profile(ex, sg, False) or []
    subgraphs = [SubgraphTime(sg.index, sg.device, len(sg.nodes), seconds.get(sg.index, 0.0) / runs * 1e3)
                 for sg in ex.subgraphs]
    nodes = [NodeTime(sg.index, sg.device, t.node, t.op, t.kernel, t.seconds / runs * 1e3)
             for sg in ex.subgraphs for t in timed[sg.index]]
    return Profile(runs, wall / runs * 1e3, subgraphs, nodes, _pairs(g.stage_times))


def _device_profile(ex, sg, enable: bool) -> list | None:
    """The device's optional ``profile`` hook on a prepared subgraph (None when it has none)."""
    device = ex.devices.get(sg.device)
    hook = device.interface.profile if device is not None else None
    if hook is None or sg.device_graph is None:
        return None
    with wrapped(lambda exc: DeviceError(f"device '{sg.device}': profile hook failed on subgraph #{sg.index}: "
                                         f"{type(exc).__name__}: {exc}")):
        return hook(device, sg, enable)


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
    return g.outputs[_resolve(g.graph.outputs, key, "output")]


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
    prepared = g.execution is not None and g.state in (GraphState.PREPARED, GraphState.DONE)
    g.state = GraphState.CREATED
    if prepared:
        g.scheduler.postrun(g.execution)


def _release_device_graphs(g: GraphHandle) -> None:
    """Call release_graph for what each device's pre_run built (every one, even when one raises)."""
    ex = g.execution
    if ex is None:
        return
    g.execution = g.prepared = None
    release_device_graphs(ex)


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
        for step in (_postrun, _release_device_graphs):
            try:
                step(g)
            except NnhalError as exc:
                failures.append(exc)
        g.inputs.clear()
        g.outputs.clear()
        g.run = None
        g.state = GraphState.DESTROYED
    if failures:
        if len(failures) == 1:
            raise failures[0]
        raise DeviceError("destroy_graph: " + "; ".join(str(f) for f in failures)) from failures[0]


def devices() -> list[Device]:
    """Registered devices, in registration order."""
    _require_init()
    return registered_devices()
