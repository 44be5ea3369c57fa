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
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nnhal.device.device import Device
from nnhal.device.manager import find_device, registered_devices
from nnhal.errors import (DeviceError, InputError, InternalError, LimitError, ModelError, NnhalError, RegistryError,
                          StateError)
from nnhal.graph.graph import Graph
from nnhal.graph.tensor import TensorKind
from nnhal.optimizer.budget import check_budget
from nnhal.optimizer.infer import FoldLimits, infer_graph
from nnhal.optimizer.mixed import choose_mixed
from nnhal.optimizer.passes import run_passes
from nnhal.optimizer.qdq import fold_qdq, fuse_qdq
from nnhal.optimizer.placement import Decision, place
from nnhal.optimizer.quantize import quantize_activations
from nnhal.optimizer.report import PlacementReport, build_report
from nnhal.optimizer.split import default_split, enforce_min_group_size
from nnhal.options import Options, validate_device_options
from nnhal.profiling import NodeTime, Profile, SubgraphTime
from nnhal.scheduler.default import DEFAULT_SCHEDULER, fall_back
from nnhal.scheduler.scheduler import Execution, Scheduler
from nnhal.serializer.onnx_import import load_onnx

log = logging.getLogger("nnhal")
_lock = threading.RLock()
_registered: list[Any] = []   # registry entries registered by init(), in order


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
def init() -> None:
    """Register every device of the generated registry (idempotent)."""
    with _lock:
        if _registered:
            return
        try:
            from nnhal import registry
        except ImportError as exc:
            raise RegistryError("nnhal.registry is missing: the package was not built. Install it with "
                                "'pip install .' (or 'pip install -e .') so CMake renders the registry") from exc
        for entry in registry.DEVICES:
            try:
                module = importlib.import_module(entry.module)
                register = getattr(module, entry.register)
            except (ImportError, AttributeError) as exc:
                release()
                raise RegistryError(f"device '{entry.name}' ({entry.option}=ON): cannot load "
                                    f"{entry.module}.{entry.register}: {exc}") from exc
            register()
            _registered.append(entry)


def release() -> None:
    """Unregister the devices init() registered, in reverse order."""
    with _lock:
        while _registered:
            entry = _registered.pop()
            module = importlib.import_module(entry.module)
            getattr(module, entry.unregister)()


def _require_init() -> None:
    if not _registered:
        init()


# --------------------------------------------------------------------- context
@dataclass
class Context:
    """An ordered device list (the CPU appended as fallback unless strict) and their options."""

    name: str
    devices: list[str]
    device_options: dict[str, Any]
    strict: bool = False
    pins: dict[str, str] = field(default_factory=dict)
    deny: dict[str, list[str]] = field(default_factory=dict)


@_typed
def create_context(name: str = "default", devices: list[str] | None = None,
                   device_options: dict[str, dict] | None = None, strict: bool = False,
                   pins: dict[str, str] | None = None, deny: dict[str, list[str]] | None = None) -> Context:
    """A context over ``devices`` (names, in priority order). Unknown names raise DeviceError."""
    _require_init()
    names = list(devices) if devices else ["cpu"]
    for n in names:
        find_device(n)
    if len(set(names)) != len(names):
        raise DeviceError(f"device list {names} names a device twice")
    if not strict and "cpu" not in names:
        names.append("cpu")
    device_options = dict(device_options or {})
    for dev in device_options:
        if dev not in names:
            raise DeviceError(f"device_options names '{dev}', which is not in the context's devices {names}")
    typed = {n: validate_device_options(n, find_device(n).describe().options, device_options.get(n)) for n in names}
    for target in list((pins or {}).values()):
        if target not in names:
            raise DeviceError(f"a pin names device '{target}', which is not in the context's devices {names}")
    return Context(name, names, typed, strict, dict(pins or {}), {k: list(v) for k, v in (deny or {}).items()})


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

    @property
    def input_names(self) -> list[str]:
        return list(self.graph.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.graph.outputs)


@_typed
def create_graph(context: Context, model_format: str, model: Any, base_dir: str | None = None) -> GraphHandle:
    """Import a model ('onnx': path, bytes or onnx.ModelProto) into a context.

    External-data tensors resolve only inside one folder: the model file's own, or ``base_dir``,
    which bytes and a ModelProto with external data must give (see README, "Untrusted models").
    """
    if not isinstance(context, Context):
        raise StateError(f"create_graph needs a context from create_context(), got {type(context).__name__}")
    if model_format != "onnx":
        raise ModelError(f"model format '{model_format}' is not supported; nnhal reads 'onnx'")
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
        import difflib
        close = difflib.get_close_matches(str(key), names, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise InputError(f"the graph has no {what} named '{key}' ({what}s: {names}){hint}")
    return key


@_typed
def set_graph_input(g: GraphHandle, key: str | int, value: Any) -> None:
    """Bind an input by name or index; its dtype and shape are checked against the model."""
    _alive(g)
    if g.state is GraphState.RUNNING:
        raise StateError("cannot set an input while the graph is running; call wait_graph() first")
    name = _resolve(g.graph.inputs, key, "input")
    t = g.graph.tensors[name]
    array = np.asarray(value)
    if t.dtype is not None and array.dtype != t.dtype:
        raise InputError(f"input '{name}' expects dtype {t.dtype}, got {array.dtype}; convert it with .astype(np.{t.dtype})")
    if t.shape is not None:
        if array.ndim != len(t.shape) or any(d is not None and d != s for d, s in zip(t.shape, array.shape)):
            want = "x".join("?" if d is None else str(d) for d in t.shape) or "scalar"
            raise InputError(f"input '{name}' expects shape [{want}], got {list(array.shape)}")
    g.inputs[name] = np.require(array, requirements="C")


def _plan(g: GraphHandle, options: Options) -> tuple[Graph, list, list[Device], list[str]]:
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
    g.pass_report = {"fuse_qdq": fused, **run_passes(graph)}
    check_budget(graph, options.max_graph_bytes, folded)
    ctx = g.context
    devices = [find_device(n) for n in ctx.devices]
    deny = dict(ctx.deny)
    for name in options.keep_fp32:      # only the fallback device runs a node in fp32 under a quantized precision
        deny[name] = list(deny.get(name, [])) + [d.name for d in devices if d.name != "cpu"]
    g.placement = place(graph, devices, options.precision, ctx.pins, deny)
    moved = enforce_min_group_size(graph, g.placement, options.min_group_size)
    assignment = {n: d.device for n, d in g.placement.items()}
    splitter = next((d.optimizer.split_graph for d in devices if d.optimizer and d.optimizer.split_graph), None)
    subgraphs = splitter(graph, assignment) if splitter else default_split(graph, assignment)
    for sg in subgraphs:
        sg.original_nodes = list(sg.nodes)
        sg.precision = options.precision if options.precision in find_device(sg.device).describe().precisions \
            else "fp32"
    return graph, subgraphs, devices, moved


@_typed
def prerun_graph(g: GraphHandle, options: Options | None = None) -> None:
    """Infer shapes, fold constants, place, split, set precision and prepare every subgraph."""
    _alive(g)
    if g.state is GraphState.RUNNING:
        raise StateError("the graph is running; call wait_graph() before prerun_graph()")
    if g.state in (GraphState.PREPARED, GraphState.DONE):
        postrun_graph(g)
    _release_device_graphs(g)
    options = options or Options()
    if options.precision == "mixed":
        missing = [n for n in g.graph.inputs if n not in g.inputs]
        if missing:
            raise InputError(f"precision 'mixed' measures errors on real inputs: set {missing} before prerun_graph")
        with _out_of_memory("choosing mixed precisions"):
            options, g.mixed_report = choose_mixed(g.graph, options, lambda opts: _measure(g, opts))
    with _out_of_memory("planning (inference, folding, placement, split)"):
        graph, subgraphs, devices, moved = _plan(g, options)
    for sg in subgraphs:
        sg.keep_fp32 = options.keep_fp32
    with _out_of_memory("calibration"):
        quantize_activations(graph, subgraphs, options.precision, g.inputs, options.calibration)
    g.execution = Execution(subgraphs, {d.name: d for d in devices}, options, graph=graph)
    for i, sg in enumerate(subgraphs):
        sg.device_options = g.context.device_options.get(sg.device)
        device = find_device(sg.device)
        if device.optimizer is not None and device.optimizer.optimize_graph is not None:
            try:
                subgraphs[i] = device.optimizer.optimize_graph(sg, sg.precision) or sg
            except Exception as exc:
                fall_back(g.execution, sg, "optimize_graph", exc, prepare=False)
    g.scheduler = next((d.scheduler for d in devices[:1] if d.scheduler is not None), DEFAULT_SCHEDULER)
    g.moved_by_min_group = moved
    g.prepared_graph = graph
    with _out_of_memory("device preparation"):
        g.scheduler.prerun(g.execution)
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


def _measure(g: GraphHandle, options: Options) -> list[np.ndarray]:
    """Outputs of the graph's current inputs under ``options``, in a throwaway handle."""
    probe = GraphHandle(g.context, g.graph, inputs=dict(g.inputs))
    try:
        prerun_graph(probe, options)
        run_graph(probe)
        return [get_graph_output(probe, i) for i in range(len(probe.graph.outputs))]
    finally:
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
    if any(g.prepared_shapes.get(n) != a.shape for n, a in g.inputs.items()):
        log.info("input shapes changed since prerun; preparing the graph again")
        prerun_graph(g, g.options)
    ex = g.execution
    ex.values = dict(g.inputs)
    for name in g.graph.outputs:
        t = g.prepared_graph.tensors[name]
        if t.kind is TensorKind.CONSTANT:
            ex.values[name] = t.value
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
    for _ in range(warmup):
        run_graph(g)
    ex = g.execution
    # device graphs that time their nodes: a ``timings`` attribute (None when off) and ``steps`` with
    # ``.node`` and ``.kernel_name`` (the CPU's Plan)
    timed = [sg for sg in ex.subgraphs
             if hasattr(sg.device_graph, "timings") and hasattr(sg.device_graph, "steps")]
    ex.timings = {}
    for sg in timed:
        sg.device_graph.timings = [0.0] * len(sg.device_graph.steps)
    try:
        t0 = time.perf_counter()
        for _ in range(runs):
            run_graph(g)
        wall = time.perf_counter() - t0
        ex = g.execution     # a changed input shape prepares again: read what actually ran
        subgraphs = [SubgraphTime(sg.index, sg.device, len(sg.nodes), ex.timings.get(sg.index, 0.0) / runs * 1e3)
                     for sg in ex.subgraphs]
        nodes = [NodeTime(sg.index, sg.device, st.node.name, st.node.op_type, st.kernel_name, t / runs * 1e3)
                 for sg in ex.subgraphs if getattr(sg.device_graph, "timings", None)
                 for st, t in zip(sg.device_graph.steps, sg.device_graph.timings)]
    finally:
        ex.timings = None
        for sg in ex.subgraphs:
            if getattr(sg.device_graph, "timings", None) is not None:
                sg.device_graph.timings = None
    return Profile(runs, wall / runs * 1e3, subgraphs, nodes)


@_typed
def wait_graph(g: GraphHandle, timeout: float | None = None) -> bool:
    """Wait for a run started with block=False; True when it has finished."""
    _alive(g)
    if g.state is not GraphState.RUNNING:
        return True
    try:
        done = g.scheduler.wait(g.execution, timeout)
    except BaseException:
        g.state = GraphState.PREPARED
        raise
    if done:
        _finish(g)
    return done


def _finish(g: GraphHandle) -> None:
    g.outputs = {n: g.execution.values[n] for n in g.graph.outputs}
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
    """Release run state (post_run, allocator.release); prerun_graph may follow."""
    _alive(g)
    if g.state is GraphState.RUNNING:
        raise StateError("the graph is running; call wait_graph() first")
    if g.execution is not None and g.state in (GraphState.PREPARED, GraphState.DONE):
        g.scheduler.postrun(g.execution)
    g.state = GraphState.CREATED


def _release_device_graphs(g: GraphHandle) -> None:
    """Call release_graph for what each device's pre_run built."""
    if g.execution is None:
        return
    for sg in g.execution.subgraphs:
        device = g.execution.devices[sg.device]
        if device.interface.release_graph is not None and sg.device_graph is not None:
            device.interface.release_graph(device, sg.device_graph)
        sg.device_graph = None
    g.execution = None


@_typed
def destroy_graph(g: GraphHandle) -> None:
    """Free everything the graph holds; the handle cannot be used afterwards."""
    _alive(g)
    if g.state is GraphState.RUNNING:
        wait_graph(g)
    postrun_graph(g)
    _release_device_graphs(g)
    g.inputs.clear()
    g.outputs.clear()
    g.state = GraphState.DESTROYED


def devices() -> list[Device]:
    """Registered devices, in registration order."""
    _require_init()
    return registered_devices()
