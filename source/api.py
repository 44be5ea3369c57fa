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

import contextlib
import enum
import functools
import importlib
import importlib.util
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from collections.abc import Sequence
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
from nnhal.errors import (DeviceError, InputError, InternalError, LimitError, ModelError, NnhalError, OptionsError,
                          RegistryError, StateError, did_you_mean)
from nnhal.graph.graph import Graph
from nnhal.graph.tensor import TensorKind
from nnhal.optimizer.budget import check_budget
from nnhal.optimizer.infer import FoldLimits, infer_graph
from nnhal.optimizer.mixed import choose_mixed
from nnhal.optimizer.passes import run_passes
from nnhal.optimizer.qdq import fold_qdq, fuse_qdq
from nnhal.optimizer.placement import Decision, place
from nnhal.optimizer.outliers import SAMPLE_ROWS, Int8Plan, plan_int8, token_activations, token_statistics
from nnhal.optimizer.quantize import QUANTIZED, quantize_activations
from nnhal.optimizer.report import PlacementReport, build_report
from nnhal.optimizer.split import enforce_min_group_size, split_per_device
from nnhal.options import Options, validate_device_options
from nnhal.profiling import NodeTime, Profile, SubgraphTime
from nnhal.scheduler.cleanup import Cleanup
from nnhal.scheduler.default import DEFAULT_SCHEDULER, fall_back, release_subgraph
from nnhal.scheduler.gcpause import gc_paused
from nnhal.scheduler.locks import ReadWriteLock
from nnhal.scheduler.scheduler import Execution, Scheduler
from nnhal.serializer.cache import load_cached
from nnhal.serializer.onnx_import import load_onnx

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

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except NnhalError:
            raise
        except MemoryError as exc:
            raise LimitError(f"{stage} ran out of memory: {exc or 'MemoryError'}") from exc
        except Exception as exc:
            raise InternalError(f"{stage} failed unexpectedly ({type(exc).__name__}: {exc}); this is a gap in "
                                f"nnhal's checks, please report it with the model") from exc
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
@dataclass
class Context:
    """An ordered device list (the fallback device appended unless strict) and their options."""

    name: str
    devices: list[str]
    device_options: dict[str, Any]
    strict: bool = False
    pins: dict[str, str] = field(default_factory=dict)
    deny: dict[str, list[str]] = field(default_factory=dict)

    @property
    def fallback(self) -> str | None:
        """Where a failing subgraph is re-placed; None when strict."""
        return None if self.strict or FALLBACK_DEVICE not in self.devices else FALLBACK_DEVICE


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


def _check_node_names(graph: Graph, ctx: Context) -> None:
    """Pins and denials must name nodes or op types of the model: a typo would silently change nothing."""
    known = {node.name for node in graph.nodes} | {node.op_type for node in graph.nodes}
    for what, table in (("pins", ctx.pins), ("deny", ctx.deny)):
        for node in table:
            if node not in known:
                raise OptionsError(f"{what} names '{node}', which is neither a node nor an op type of the "
                                   f"model{did_you_mean(node, known)}")


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
    if compiled_cache is not None:
        with gc_paused():
            return GraphHandle(context, load_cached(model, compiled_cache, lambda m: load_onnx(m, base_dir)))
    with gc_paused():
        return GraphHandle(context, load_onnx(model, base_dir))


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
        raise InputError(f"input '{name}' expects dtype {t.dtype}, got {array.dtype}; convert it with .astype(np.{t.dtype})")
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


@dataclass
class _Calibrated:
    """What a mixed-precision search calibrates once on the graph's inputs and every later prepare reuses:
    the per-channel extremes smoothing reads and the activation ranges (its probes and the final prepare
    rewrite the same graph on the same inputs, so both are the same each time)."""

    channels: dict[str, tuple] | None = None
    samples: dict[str, np.ndarray] | None = None       # rows of the token activations (measured smoothing)
    alphas: dict = field(default_factory=dict)          # smoothing measured on those rows, per activation
    ranges: dict[str, tuple[float, float]] | None = None
    # the last probe, still prepared, and its options: the final prepare adopts it when mixed chose those
    last: tuple[Options, "GraphHandle"] | None = None

    def keep(self, options: Options, probe: "GraphHandle") -> None:
        """Hold ``probe`` (prepared under ``options``), destroying the one held before."""
        self.release()
        self.last = (options, probe)

    def take(self, options: Options) -> "GraphHandle | None":
        """The held probe if it was prepared under ``options`` (then no longer held); else None."""
        if self.last is not None and self.last[0] == options:
            probe, self.last = self.last[1], None
            return probe
        return None

    def release(self) -> None:
        if self.last is not None:
            probe, self.last = self.last[1], None
            destroy_graph(probe)


def _plan(g: GraphHandle, options: Options, memo: _Calibrated | None = None
          ) -> tuple[Graph, list, list[Device], list[str]]:
    """Infer, run passes, place, apply the group-size policy and split (nothing compiled yet)."""
    graph = g.graph.copy()
    for name in graph.inputs:
        if name in g.inputs:
            t = graph.tensors[name]
            t.dtype, t.shape = g.inputs[name].dtype, tuple(g.inputs[name].shape)
    # quantized precisions take the model's own Q/DQ parameters; fp32 runs them as integer ops
    fused = fold_qdq(graph) if options.precision in ("int8", "uint8") else fuse_qdq(graph)
    limits = FoldLimits(options.max_fold_bytes, options.max_loop_trips, options.max_graph_bytes)
    folded = infer_graph(graph, fold=options.fold_constants, limits=limits)
    g.pass_report = {"fuse_qdq": fused, **run_passes(graph, options.precision)}
    g.int8_plan = None
    if options.precision in QUANTIZED:
        # smoothing reads per-channel extremes: the table's, else those of the inputs that calibrate
        # and, with rows of the activations (inputs, no table) where every device quantizes them dynamically,
        # measures smoothing's alpha under that quantization
        samples: dict[str, np.ndarray] = {}
        if options.calibration is not None:
            channels = getattr(options.calibration, "channels", {})
        elif memo is not None and memo.channels is not None:
            channels, samples = memo.channels, memo.samples or {}
        else:
            dynamic = all("dynamic" in find_device(n).describe().activation_quantization for n in g.context.devices)
            channels, samples = token_statistics(graph, g.inputs, token_activations(graph), SAMPLE_ROWS if dynamic
                                                 else 0) if all(n in g.inputs for n in graph.inputs) else ({}, {})
            if memo is not None:
                memo.channels, memo.samples = channels, samples
        g.int8_plan = plan_int8(graph, channels, samples, signed=options.precision == "int8",
                                alphas=memo.alphas if memo is not None else None)
    check_budget(graph, options.max_graph_bytes, folded)
    ctx = g.context
    _check_node_names(g.graph, ctx)
    devices = [find_device(n) for n in ctx.devices]
    deny = dict(ctx.deny)
    for name in options.keep_fp32:      # only the fallback device runs a node in fp32 under a quantized precision
        deny[name] = list(deny.get(name, [])) + [d.name for d in devices if d.name != FALLBACK_DEVICE]
    g.placement = place(graph, devices, options.precision, ctx.pins, deny, fallback=FALLBACK_DEVICE,
                        higher=g.int8_plan.higher if g.int8_plan else None,
                        dynamic=g.int8_plan.required if g.int8_plan else None,
                        prefer=options.prefer)
    moved = enforce_min_group_size(graph, g.placement, options.min_group_size, fallback=FALLBACK_DEVICE)
    assignment = {n: d.device for n, d in g.placement.items()}
    subgraphs = split_per_device(graph, assignment, devices)     # each device's split_graph for its own nodes
    for sg in subgraphs:
        sg.original_nodes = list(sg.nodes)
        sg.precision = options.precision if options.precision in find_device(sg.device).describe().precisions \
            else "fp32"
    return graph, subgraphs, devices, moved


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
def _prerun_locked(g: GraphHandle, options: Options, memo: _Calibrated | None = None) -> None:
    if g.state in (GraphState.PREPARED, GraphState.DONE):
        _postrun(g)
    _release_device_graphs(g)
    if options.precision == "mixed":
        missing = [n for n in g.graph.inputs if n not in g.inputs]
        if missing:
            raise InputError(f"precision 'mixed' measures errors on real inputs: set {missing} before prerun_graph")
        # NOTE: the search's probes and this prepare calibrate the same rewritten graph on the same inputs:
        # once is enough (calibration was two thirds of each probe's prepare on MiniLM)
        memo = _Calibrated()
        try:
            with _out_of_memory("choosing mixed precisions"):
                options, g.mixed_report = choose_mixed(g.graph, options, lambda opts: _probe(g, opts, memo),
                                                       dict(g.inputs), lambda opts: _plan_rows(g, opts, memo))
            chosen = memo.take(options)
        finally:
            memo.release()
        if chosen is not None:          # the search's last probe is the prepare it chose: adopt, not redo
            _adopt(g, chosen)
            return
    with _out_of_memory("planning (inference, folding, placement, split)"):
        graph, subgraphs, devices, moved = _plan(g, options, memo)
    ranges = options.calibration
    for sg in subgraphs:
        sg.keep_fp32 = options.keep_fp32
        if g.int8_plan is not None:
            sg.higher, sg.dynamic = frozenset(g.int8_plan.higher), dict(g.int8_plan.dynamic)
    if ranges is not None and g.int8_plan is not None:
        ranges = {**ranges, **g.int8_plan.ranges}
        ranges.update({new: ranges[old] for new, old in g.int8_plan.aliases.items() if old in ranges})
    if ranges is None and memo is not None:
        ranges = memo.ranges
    with _out_of_memory("calibration"):
        table = quantize_activations(graph, subgraphs, options.precision, g.inputs, ranges)
    if memo is not None and memo.ranges is None and table:
        memo.ranges = table
    ex = Execution(subgraphs, {d.name: d for d in devices}, options, graph=graph, fallback=g.context.fallback)
    g.execution = ex
    try:
        for i, sg in enumerate(subgraphs):
            sg.device_options = g.context.device_options.get(sg.device)
            device = find_device(sg.device)
            if device.optimizer is not None and device.optimizer.optimize_graph is not None:
                try:
                    subgraphs[i] = device.optimizer.optimize_graph(sg, sg.precision) or sg
                except Exception as exc:
                    fall_back(ex, sg, "optimize_graph", exc, prepare=False)
        g.scheduler = next((d.scheduler for d in devices[:1] if d.scheduler is not None), DEFAULT_SCHEDULER)
        g.moved_by_min_group = moved
        g.prepared_graph = graph
        with _out_of_memory("device preparation"):
            g.scheduler.prerun(ex)
    except BaseException:
        _release_execution(ex)
        g.execution = None
        g.state = GraphState.CREATED
        raise
    g.prepared_shapes = {n: a.shape for n, a in g.inputs.items()}
    g.options = options
    g.state = GraphState.PREPARED


@contextlib.contextmanager
def _out_of_memory(stage: str):
    """MemoryError in a prerun stage becomes a LimitError naming the stage."""
    try:
        yield
    except MemoryError as exc:
        raise LimitError(f"prerun ran out of memory during {stage}: {exc or 'MemoryError'}; lower "
                         f"Options.max_graph_bytes / max_fold_bytes to be refused earlier, or give the "
                         f"process more memory") from exc


def _release_execution(ex: Execution) -> None:
    """After a failed prerun: release what every subgraph allocated and built (errors logged, the first kept)."""
    cleanup = Cleanup("releasing a failed prerun")
    for sg in ex.subgraphs:
        release_subgraph(ex, sg, cleanup)
    for device, hook, error in cleanup.failures:
        log.warning("nnhal: releasing after a failed prerun: device '%s' hook %s raised %s", device, hook, error)


def _probe(g: GraphHandle, options: Options, memo: _Calibrated | None = None
           ) -> tuple[list[np.ndarray], Graph | None, Int8Plan | None]:
    """Outputs of the graph's current inputs under ``options`` (in a throwaway handle), with its prepared
    graph and int8 plan; ``memo`` carries calibration from one probe to the next."""
    probe = GraphHandle(g.context, g.graph, inputs=dict(g.inputs))
    held = False
    try:
        with probe.lock.write():
            _prerun_locked(probe, options, memo)
        run_graph(probe)
        outputs = [get_graph_output(probe, i) for i in range(len(probe.graph.outputs))]
        if memo is not None:
            memo.keep(options, probe)
            held = True
        return outputs, probe.prepared_graph, probe.int8_plan
    finally:
        if not held:
            destroy_graph(probe)


# NOTE: mixed measures per-node sensitivities on the first half of a batch of at least SENSITIVITY_ROWS rows:
# each node's own error is a ratio of norms, stable over 8 of 16 sentences (MiniLM), and the search's fp32
# runs of the rest of the graph after each node were most of its time
SENSITIVITY_ROWS = 8


def _plan_rows(g: GraphHandle, options: Options, memo: _Calibrated
               ) -> tuple[Graph, Int8Plan | None, dict[str, np.ndarray]] | None:
    """The quantized rewrite of ``g``'s graph planned (and its activations calibrated from ``memo``, not
    compiled) on the first half of its input rows; None when the batch is small, the inputs do not share
    a leading batch axis, or the graph does not plan on fewer rows (fixed shapes)."""
    sizes = {a.shape[0] if a.ndim else 0 for a in g.inputs.values()}
    if len(sizes) != 1 or min(sizes) < SENSITIVITY_ROWS or memo.ranges is None:
        return None
    rows = min(sizes) // 2
    feeds = {n: a[:rows] for n, a in g.inputs.items()}
    sub = GraphHandle(g.context, g.graph, inputs=feeds)
    try:
        graph, subgraphs, _, _ = _plan(sub, options, memo)
        for sg in subgraphs:
            sg.keep_fp32 = options.keep_fp32
        quantize_activations(graph, subgraphs, options.precision, feeds, memo.ranges)
    except NnhalError:
        return None
    return graph, sub.int8_plan, feeds


def _adopt(g: GraphHandle, probe: GraphHandle) -> None:
    """Make ``g`` prepared with what ``probe`` (the same graph and inputs) prepared; ``probe`` is destroyed."""
    for name in ("execution", "scheduler", "placement", "prepared_shapes", "prepared_graph", "pass_report",
                 "moved_by_min_group", "int8_plan", "options"):
        setattr(g, name, getattr(probe, name))
    g.outputs, g.run = {}, None
    g.state = GraphState.PREPARED
    probe.execution, probe.state = None, GraphState.CREATED
    destroy_graph(probe)


@_typed
def report(g: GraphHandle) -> PlacementReport:
    """What ran where after prerun: placement with reasons, subgraphs, boundaries, fallbacks."""
    _alive(g)
    if g.execution is None or g.prepared_graph is None:
        raise StateError("no placement yet: call prerun_graph() first (or nnhal.explain() before compiling)")
    return build_report(g.prepared_graph, g.placement, g.execution.subgraphs, g.moved_by_min_group,
                        g.options.min_group_size, g.execution.report)


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
    graph, subgraphs, _, moved = _plan(g, options)
    return build_report(graph, g.placement, subgraphs, moved, min_group_size)


def _prepared_for(g: GraphHandle, feeds: dict[str, np.ndarray]) -> bool:
    """Whether the prepared graph serves ``feeds`` as they are (same shapes as at prerun)."""
    return g.state in (GraphState.PREPARED, GraphState.DONE, GraphState.RUNNING) and g.execution is not None \
        and all(g.prepared_shapes.get(n) == a.shape for n, a in feeds.items())


def _begin(g: GraphHandle, feeds: dict[str, np.ndarray]) -> Execution:
    """A run's execution over the prepared graph, its value store holding ``feeds`` and constant outputs."""
    ex = g.execution.begin(dict(feeds))
    for name in g.graph.outputs:
        t = g.prepared_graph.tensors[name]
        if t.kind is TensorKind.CONSTANT:
            ex.values[name] = t.value.copy()     # the user's own: changing it must not change the graph
    return ex


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
    return Profile(runs, wall / runs * 1e3, subgraphs, nodes)


def _device_profile(ex, sg, enable: bool) -> list | None:
    """The device's optional ``profile`` hook on a prepared subgraph (None when it has none)."""
    device = ex.devices.get(sg.device)
    hook = device.interface.profile if device is not None else None
    if hook is None or sg.device_graph is None:
        return None
    try:
        return hook(device, sg, enable)
    except NnhalError:
        raise
    except Exception as exc:
        raise DeviceError(f"device '{sg.device}': profile hook failed on subgraph #{sg.index}: "
                          f"{type(exc).__name__}: {exc}") from exc


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
    g.execution = None
    cleanup = Cleanup("releasing the compiled graphs")
    for sg in ex.subgraphs:
        device = ex.devices[sg.device]
        if device.interface.release_graph is not None and sg.device_graph is not None:
            cleanup.call(device.name, "release_graph", device.interface.release_graph, device, sg.device_graph)
        sg.device_graph = None
    cleanup.raise_if_failed()


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
