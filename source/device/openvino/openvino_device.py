"""openvino: Intel's OpenVINO runtime as an nnhal device, written as a hardware team that brings its own
compiler writes one.

Placement asks OpenVINO: a candidate node is exported as a one-node ONNX model and put to
``Core.query_model`` for the target (cached by the exported bytes), and OpenVINO's reason goes into the
placement report. pre_run exports the whole subgraph (nnhal.serializer.onnx_export) and compiles it with
``compile_model``: fp32 at inference precision f32 (exact, never the bf16 a CPU with AMX would pick by
default), fp16 at f16 or bf16, whichever the target computes in; int8 / uint8 as QDQ (nnhal's calibrated
scales, see qdq.py), which OpenVINO runs as integer kernels. Runs take infer requests from a pool, so the
device is reentrant; inputs are read in place and outputs written into fresh numpy arrays
(``Tensor(shared_memory=True)``): zero-copy boundaries, declared in ``Description.memory``.
OpenVINO's model cache (CACHE_DIR) lives under the directory of the ``cache_dir`` option; the
``profile`` hook reports OpenVINO's per-layer counters under nnhal's node names.

Without the openvino package nnhal.init() lists the device unavailable (its registry entry needs the
package); without the chosen target, placement declines every node with the reason.

The module reads top to bottom: options and state, the hooks, the record, register / unregister.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

import openvino as ov

from nnhal.device.device import (
    Allocator,
    BoundaryMemory,
    Candidate,
    Description,
    Device,
    Interface,
    NodeTiming,
    Optimizer,
    Performance,
    Verdict,
)
from nnhal.device.manager import register_device, unregister_device
from nnhal.device.openvino import runtime
from nnhal.device.openvino.qdq import to_qdq
from nnhal.device.openvino.rules import why_not
from nnhal.errors import DeviceError, NnhalError
from nnhal.graph.node import Node
from nnhal.graph.subgraph import Subgraph
from nnhal.operator.table import known_ops
from nnhal.serializer.cache import trusted_directory
from nnhal.serializer.onnx_export import export_node, export_subgraph

# ------------------------------------------------------------ options, state
TARGETS = ("CPU", "GPU", "NPU", "AUTO")
HINTS = {"latency": "LATENCY", "throughput": "THROUGHPUT"}
DYNAMIC_GROUP = 32          # columns per run-time activation scale of the token products (OpenVINO's default)


@dataclass(frozen=True)
class OpenvinoOptions:
    """device_options={"openvino": {...}}."""

    target: str = "CPU"             # OpenVINO device: CPU, GPU, NPU (GPU.1 picks one of several) or AUTO
    hint: str = "latency"           # OpenVINO's PERFORMANCE_HINT: latency (one run at a time) or throughput
    threads: int = 0                # INFERENCE_NUM_THREADS; 0 = nnhal.Options.num_thread (0 there: OpenVINO's)
    cache_dir: str | None = None    # OpenVINO's model cache goes under <cache_dir>/openvino/<key>; None = off

    def __post_init__(self) -> None:
        if not isinstance(self.target, str) or self.target.split(".")[0] not in TARGETS:
            raise ValueError(f"target must be one of {', '.join(TARGETS)} (GPU.N for one of several), "
                             f"got {self.target!r}")
        if self.hint not in HINTS:
            raise ValueError(f"hint must be one of {', '.join(HINTS)}, got {self.hint!r}")
        if not isinstance(self.threads, int) or isinstance(self.threads, bool) or self.threads < 0:
            raise ValueError(f"threads must be an int >= 0, got {self.threads!r}")
        if self.cache_dir is not None and not isinstance(self.cache_dir, (str, os.PathLike)):
            raise ValueError(f"cache_dir must be a path or None, got {self.cache_dir!r}")


@dataclass
class OpenvinoState:
    """Device.privacy: OpenVINO's Core, its targets, the query cache and transfer counters."""

    core: ov.Core
    targets: list[str]
    queries: runtime.QueryCache = field(default_factory=runtime.QueryCache)
    lock: threading.Lock = field(default_factory=threading.Lock)
    live: int = 0                 # compiled subgraphs not yet released (the kit's lifetime check reads it)
    runs: int = 0
    shared_bytes: int = 0         # boundary bytes OpenVINO read or wrote in place
    copied_bytes: int = 0         # boundary bytes copied (an element type or layout OpenVINO could not take)

    def __deepcopy__(self, memo: dict) -> OpenvinoState:
        # NOTE: the kit's recording copy of the record gets counters of its own over the same Core
        return OpenvinoState(self.core, list(self.targets))


@dataclass
class OpenvinoGraph:
    """Subgraph.device_graph: the compiled model, what the run binds, and the profile's counters."""

    compiled: runtime.Compiled
    shapes: dict[str, tuple | None]          # output shapes known before the run (fresh arrays are bound)
    nodes: list[Node]
    pending: dict[int, runtime.Bound] = field(default_factory=dict)   # async runs, by the run's value store
    lock: threading.Lock = field(default_factory=threading.Lock)
    layers: dict[str, tuple[str, str, float]] | None = None           # per-layer seconds while profiling
    recompile: object = None                 # () -> Compiled with or without PERF_COUNT (profile switches)


def _options(sg: Subgraph) -> OpenvinoOptions:
    return sg.device_options or OpenvinoOptions()


def _state(device: Device) -> OpenvinoState:
    return device.privacy


def _target_missing(state: OpenvinoState, target: str) -> str | None:
    if runtime.has_target(state.targets, target):
        return None
    return f"OpenVINO has no {target} device here (available: {', '.join(state.targets) or 'none'})"


# ------------------------------------------------------------------- hooks
def openvino_init(device: Device) -> None:
    """At registration: OpenVINO's Core and the devices it sees."""
    core = ov.Core()
    device.privacy = OpenvinoState(core, runtime.targets(core))


def openvino_release_device(device: Device) -> None:
    """At unregistration: drop the Core (OpenVINO unloads its plugins with the last reference)."""
    device.privacy = None


def openvino_describe(device: Device) -> Description:
    """Every ONNX op nnhal knows (OpenVINO's query decides per node), the precisions the CPU computes in."""
    state = _state(device)
    half = runtime.half_precision(state.core, "CPU")
    precisions = ("fp32", "fp16", "int8", "uint8") if half else ("fp32", "int8", "uint8")
    return Description(
        ops=frozenset(known_ops("") + known_ops("com.microsoft")),
        precisions=precisions,
        performance={"fp32": Performance(exec_time=0.5, power_usage=0.8)},
        options=OpenvinoOptions,
        summary=f"OpenVINO {ov.get_version().split('-')[0]} on {', '.join(state.targets) or 'no device'}",
        compute={"fp16": f"OpenVINO inference precision {half}", "int8": "QDQ: OpenVINO integer kernels",
                 "uint8": "QDQ: OpenVINO integer kernels"} if half else
                {"int8": "QDQ: OpenVINO integer kernels", "uint8": "QDQ: OpenVINO integer kernels"},
        reentrant=True,      # a run binds its own infer request from the subgraph's pool
        # NOTE: under int8 the float nodes (normalizations, residual adds, softmax) stay in OpenVINO's graph
        # in f32 between the integer kernels, and the token products quantize per token at run time
        # (DYNAMIC_QUANTIZATION_GROUP_SIZE) over int8 weights
        float_in_quantized=True,
        activation_quantization=("static", "dynamic"),
        # NOTE: on the CPU target OpenVINO reads inputs and writes outputs in numpy's memory; a GPU target
        # copies over PCIe, and keeping tensors on it between subgraphs needs RemoteTensors (not done)
        memory=BoundaryMemory(host_inputs="shared", host_outputs="shared"),
    )


def openvino_evaluation(device: Device, candidate: Candidate) -> Verdict:
    """OpenVINO's own verdict: the node exported as ONNX and asked of query_model on the target (cached)."""
    state = _state(device)
    # NOTE: the candidate carries no device options; the target is checked per subgraph at pre_run, and
    # placement asks the CPU plugin, the one OpenVINO always has
    target = "CPU" if runtime.has_target(state.targets, "CPU") else (state.targets or ["CPU"])[0]
    node = candidate.node
    deviation = why_not(candidate)
    if deviation:
        return Verdict.no(deviation)
    for i, info in enumerate(candidate.inputs):
        if info is not None and info.value is None and info.shape is None and node.inputs[i]:
            # NOTE: OpenVINO's words at compile_model: "CPU plug-in doesn't support Parameter operation with
            # dynamic rank"; query_model of the one-node model does not see it (the node's input is no Parameter)
            return Verdict.no(f"input {i} has a rank unknown before the run; the OpenVINO CPU plugin takes no "
                              f"Parameter of dynamic rank")
    try:
        why = state.queries.verdict(state.core, runtime.signature(node, candidate.inputs, candidate.outputs),
                                    lambda: export_node(node, candidate.inputs, candidate.outputs), target)
    except NnhalError as exc:
        return Verdict.no(f"no ONNX form for OpenVINO: {exc}")
    return Verdict.no(why) if why else Verdict.yes()


def openvino_optimize_graph(sg: Subgraph, precision: str) -> Subgraph:
    """int8 / uint8: QuantizeLinear / DequantizeLinear around the matrix products and convolutions with the
    scales the core calibrated (qdq.py); OpenVINO's low-precision passes turn them into integer kernels.
    fp16 changes nothing here: OpenVINO's inference precision does it (pre_run)."""
    if precision in ("int8", "uint8"):
        return to_qdq(sg, precision)
    return sg


def _cache_dir(opts: OpenvinoOptions) -> str | None:
    """OpenVINO's model cache under the user's cache directory, keyed like nnhal's compiled-model cache
    (the versions of what builds the entry: OpenVINO's, nnhal's exporter) and refused like it when the
    directory is not the user's own."""
    if opts.cache_dir is None:
        return None
    from pathlib import Path

    from nnhal.serializer.cache import _versions

    key = "-".join([ov.get_version().split("-")[0], _versions()["nnhal"], _versions()["importer"]])
    folder = Path(opts.cache_dir) / "openvino" / key
    for where in (Path(opts.cache_dir), folder):
        why = trusted_directory(where)
        if why is not None:
            raise DeviceError(f"openvino: the model cache in {where} is not used: {why}")
    return str(folder)


def _config(core: ov.Core, sg: Subgraph, options, opts: OpenvinoOptions, profile: bool) -> dict:
    config: dict = {"PERFORMANCE_HINT": HINTS[opts.hint]}
    threads = opts.threads or getattr(options, "num_thread", 0)
    if threads and opts.target.split(".")[0] in ("CPU",):
        config["INFERENCE_NUM_THREADS"] = int(threads)
    if sg.precision == "fp16":
        half = runtime.half_precision(core, opts.target)
        if half is None:
            raise DeviceError(f"openvino: {opts.target} computes no 16-bit float precision (subgraph #{sg.index})")
        config["INFERENCE_PRECISION_HINT"] = half
    elif opts.target.split(".")[0] in ("CPU", "GPU"):
        # NOTE: fp32 and the QDQ precisions: f32 everywhere between the integer kernels; on a CPU with AMX or
        # avx512_bf16 OpenVINO's default is bf16, which would not be the fp32 the user asked for
        config["INFERENCE_PRECISION_HINT"] = "f32"
    cache = _cache_dir(opts)
    if cache is not None:
        config["CACHE_DIR"] = cache
    if sg.stats.get("openvino_dynamic"):
        config["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = DYNAMIC_GROUP
    if profile:
        config["PERF_COUNT"] = True
    return config


def openvino_pre_run(device: Device, sg: Subgraph, options) -> None:
    """Export the subgraph as ONNX, read it with OpenVINO's frontend and compile it for the target."""
    state = _state(device)
    opts = _options(sg)
    missing = _target_missing(state, opts.target)
    if missing:
        raise DeviceError(f"openvino: {missing} (subgraph #{sg.index})")
    try:
        model = runtime.read(state.core, export_subgraph(sg))
    except RuntimeError as exc:
        raise DeviceError(f"openvino: OpenVINO cannot read subgraph #{sg.index}: {runtime.first_line(exc)}") from exc

    shapes = {n: sg.graph.tensors[n].shape if sg.graph.tensors[n].static else None for n in sg.outputs}

    def build(profile: bool) -> runtime.Compiled:
        try:
            return runtime.compile_model(state.core, model, opts.target, _config(state.core, sg, options, opts,
                                                                                  profile), sg.inputs, sg.outputs,
                                         shapes)
        except RuntimeError as exc:
            raise DeviceError(f"openvino: compile_model of subgraph #{sg.index} for {opts.target} failed: "
                              f"{runtime.first_line(exc)}") from exc

    sg.device_graph = OpenvinoGraph(build(False), shapes, list(sg.nodes), recompile=build)
    with state.lock:
        state.live += 1
    sg.stats["openvino_target"] = opts.target
    sg.stats["openvino_layers"] = len(model.get_ops())


def _finish(device: Device, sg: Subgraph, graph: OpenvinoGraph, bound: runtime.Bound) -> None:
    outputs, copied_out = runtime.collect(graph.compiled, bound)
    if graph.layers is not None:
        for layer, (kind, kernel, seconds) in runtime.layer_times([bound.request]).items():
            old = graph.layers.get(layer, (kind, kernel, 0.0))
            graph.layers[layer] = (kind, kernel, old[2] + seconds)
    graph.compiled.give(bound.request)
    sg.values.update(outputs)
    shared = bound.shared_in + sum(v.nbytes for v in bound.outputs.values())
    state = _state(device)
    with state.lock:
        state.runs += 1
        state.shared_bytes += shared
        state.copied_bytes += bound.copied_in + copied_out


def openvino_run(device: Device, sg: Subgraph) -> None:
    """Bind the run's arrays to a pooled infer request and infer synchronously."""
    graph: OpenvinoGraph = sg.device_graph
    bound = runtime.bind(graph.compiled, sg.values, graph.shapes)
    try:
        bound.request.infer()
    except RuntimeError as exc:
        graph.compiled.give(bound.request)
        raise DeviceError(f"openvino: subgraph #{sg.index} failed: {runtime.first_line(exc)}") from exc
    _finish(device, sg, graph, bound)


def openvino_async_run(device: Device, sg: Subgraph) -> None:
    """Start the request on OpenVINO's own queue and return at once."""
    graph: OpenvinoGraph = sg.device_graph
    bound = runtime.bind(graph.compiled, sg.values, graph.shapes)
    bound.request.start_async()
    with graph.lock:
        graph.pending[id(sg.values)] = bound


def openvino_async_wait(device: Device, sg: Subgraph, try_wait: bool) -> bool:
    """True once the run's request is done (its outputs are then in subgraph.values)."""
    graph: OpenvinoGraph = sg.device_graph
    with graph.lock:
        bound = graph.pending.get(id(sg.values))
    if bound is None:
        return True
    if try_wait:
        if not bound.request.wait_for(0):
            return False
    else:
        bound.request.wait()
    with graph.lock:
        graph.pending.pop(id(sg.values), None)
    _finish(device, sg, graph, bound)
    return True


def openvino_post_run(device: Device, sg: Subgraph) -> None:
    """Drain runs that were started and never waited for."""
    graph = sg.device_graph
    if isinstance(graph, OpenvinoGraph):
        with graph.lock:
            pending, graph.pending = list(graph.pending.values()), {}
        for bound in pending:
            bound.request.wait()
            graph.compiled.give(bound.request)


def openvino_release_graph(device: Device, device_graph: OpenvinoGraph) -> None:
    """Drop the compiled model and its requests."""
    if isinstance(device_graph, OpenvinoGraph):
        device_graph.compiled = None
        state = _state(device)
        if state is not None:
            with state.lock:
                state.live -= 1


def openvino_profile(device: Device, sg: Subgraph, enable: bool) -> list[NodeTiming] | None:
    """OpenVINO's per-layer counters (PERF_COUNT: the subgraph is recompiled with them on, then off again),
    one NodeTiming per executed layer, named after the nnhal node it comes from where OpenVINO's layer name
    says (a fused layer by its first node), else by OpenVINO's own layer name."""
    graph: OpenvinoGraph = sg.device_graph
    if enable:
        graph.compiled = graph.recompile(True)
        graph.layers = {}
        return None
    layers, graph.layers = graph.layers or {}, None
    graph.compiled = graph.recompile(False)
    timings = []
    for layer, (kind, kernel, seconds) in layers.items():
        node = runtime.node_for_layer(layer, graph.nodes)
        timings.append(NodeTiming(node.name if node is not None else layer,
                                  node.op_type if node is not None else kind, f"{kind}:{kernel}", seconds))
    return timings


# ------------------------------------------------------------------ record
OPENVINO_INTERFACE = Interface(
    run=openvino_run, init=openvino_init, pre_run=openvino_pre_run, post_run=openvino_post_run,
    async_run=openvino_async_run, async_wait=openvino_async_wait, release_graph=openvino_release_graph,
    release_device=openvino_release_device, profile=openvino_profile)
OPENVINO_ALLOCATOR = Allocator(describe=openvino_describe, evaluation=openvino_evaluation)
OPENVINO_OPTIMIZER = Optimizer(optimize_graph=openvino_optimize_graph)


def register_openvino_device() -> None:
    register_device(Device(name="openvino", interface=OPENVINO_INTERFACE, allocator=OPENVINO_ALLOCATOR,
                           optimizer=OPENVINO_OPTIMIZER))


def unregister_openvino_device() -> None:
    unregister_device("openvino")


def live_graphs(device: Device) -> int:
    """Compiled subgraphs not yet released (0 after every session is closed)."""
    return _state(device).live


__all__ = ["OpenvinoOptions", "live_graphs", "register_openvino_device", "unregister_openvino_device"]
