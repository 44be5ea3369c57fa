"""webgpu: a real GPU device on wgpu-py. WGSL compute shaders over Vulkan, Metal or D3D12; on a machine
without a GPU, Mesa's lavapipe (a Vulkan driver on the CPU) runs the same shaders.

Tensors stay on the GPU: weights are uploaded once at pre_run, intermediates live in buffers the
allocate hook plans by lifetime, and only the subgraph's boundary tensors cross. A run writes the
inputs, submits one command buffer (every recorded dispatch, then the output copies) and maps the
outputs; async_run returns after the submit and async_wait polls the mapping.

Without the wgpu package or without an adapter the device still registers, describes no ops and
says why in its summary, so placement passes it over with that reason.

The module reads top to bottom: options and state, the hooks, the record, register / unregister.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from nnhal.device.device import Allocator, Candidate, Description, Device, Interface, NodeTiming, Performance, Verdict
from nnhal.device.manager import register_device, unregister_device
from nnhal.device.webgpu.gpu import Gpu, open_gpu
from nnhal.device.webgpu.kernels.base import elem_of
from nnhal.device.webgpu.kernels.table import KERNELS
from nnhal.device.webgpu.plan import Plan, make_plan
from nnhal.device.webgpu.program import Memory, Program, allocate, build, read_outputs, read_timings, submit
from nnhal.errors import DeviceError
from nnhal.graph.subgraph import Subgraph

# ------------------------------------------------------------ options, state
GEMM_CHOICES = ("auto", "tiled", "direct")


@dataclass(frozen=True)
class WebgpuOptions:
    """device_options={"webgpu": {...}}."""

    # GEMM shape: 'tiled' stages tiles in workgroup memory (GPUs); 'direct' keeps registers only (CPU
    # adapters, where workgroup memory is plain memory and barriers are costly); 'auto' picks by adapter
    gemm: str = "auto"

    def __post_init__(self) -> None:
        if self.gemm not in GEMM_CHOICES:
            raise ValueError(f"gemm must be one of {', '.join(GEMM_CHOICES)}, got {self.gemm!r}")


@dataclass
class WebgpuState:
    """Device.privacy: the GPU (opened on first use) and transfer counters."""

    gpu: Gpu | None = None
    waiter: ThreadPoolExecutor | None = None      # maps the outputs of async runs
    lock: threading.Lock = field(default_factory=threading.Lock)
    runs: int = 0
    async_runs: int = 0                           # runs started by async_run (overlapping other devices' work)
    bytes_in: int = 0
    bytes_out: int = 0

    def __deepcopy__(self, memo: dict) -> "WebgpuState":
        # NOTE: a second instance of the record (the device kit's recording copy) gets a state of its
        # own; GPU handles and the waiter thread cannot be copied
        return WebgpuState(waiter=ThreadPoolExecutor(max_workers=1, thread_name_prefix="webgpu"))


@dataclass
class WebgpuGraph:
    """Subgraph.device_graph: the memory plan (from allocate) and the program (from pre_run)."""

    plan: Plan
    memory: Memory
    program: Program | None = None
    timings: list[float] | None = None     # set by the profile hook: GPU seconds per dispatch, summed over runs

    @property
    def steps(self) -> list:
        """What the profile hook times: the dispatches (``.node``, ``.kernel_name``)."""
        return self.program.dispatches if self.program is not None else []


def _gpu(device: Device) -> Gpu:
    state: WebgpuState = device.privacy
    with state.lock:
        if state.gpu is None:
            state.gpu = open_gpu()
        return state.gpu


def _ready_gpu(device: Device) -> Gpu:
    gpu = _gpu(device)
    if not gpu.ok:
        raise DeviceError(f"webgpu is unavailable: {gpu.unavailable}")
    return gpu


# ------------------------------------------------------------------- hooks
def webgpu_init(device: Device) -> None:
    """At registration: only the state. The adapter opens at the first describe (it costs ~1 s on lavapipe)."""
    device.privacy = WebgpuState(waiter=ThreadPoolExecutor(max_workers=1, thread_name_prefix="webgpu"))


def webgpu_release_device(device: Device) -> None:
    """At unregistration: drop the GPU and its pipeline cache."""
    state: WebgpuState = device.privacy
    if state.waiter is not None:
        state.waiter.shutdown(wait=True)
    if state.gpu is not None:
        # NOTE: dropping the last reference releases the wgpu device; an explicit destroy() leaves
        # wgpu-py's finaliser failing on the destroyed object
        state.gpu.pipelines.clear()
    state.gpu = None


def webgpu_describe(device: Device) -> Description:
    """The ops the kernels implement, on this adapter; none (and why) when there is no adapter.

    fp16 (f16 storage, f32 compute) only where the adapter has ``shader-f16``.
    """
    gpu = _gpu(device)
    if not gpu.ok:
        return Description(ops=frozenset(), precisions=("fp32",), options=WebgpuOptions,
                           summary=f"unavailable: {gpu.unavailable}")
    f16 = "shader-f16: fp16 storage" if gpu.f16 else "no shader-f16: fp32 only"
    return Description(
        ops=frozenset(KERNELS), precisions=("fp32", "fp16") if gpu.f16 else ("fp32",),
        performance={p: Performance(exec_time=0.5, power_usage=0.5) for p in ("fp32", "fp16")},
        options=WebgpuOptions,
        compute={"fp16": "float16 storage, float32 compute"},
        # NOTE: not reentrant: a run writes the subgraph's shared input buffers and its pending readback
        # lives in device_graph; the core serialises runs on this device
        reentrant=False,
        summary=f"{gpu.name}; max storage binding {gpu.max_binding:,} bytes; {f16}")


def webgpu_evaluation(device: Device, candidate: Candidate) -> Verdict:
    """The node's kernel accepts its attributes, dtypes and shapes, and every buffer fits one binding."""
    gpu = _gpu(device)
    node = candidate.node
    if not gpu.ok:
        return Verdict.no(f"webgpu is unavailable: {gpu.unavailable}")
    module = KERNELS.get(node.op_type)
    if module is None or node.domain not in ("", "ai.onnx"):
        return Verdict.no(f"no WGSL kernel for {node.domain + '.' if node.domain else ''}{node.op_type}")
    for i, info in enumerate(candidate.outputs):
        if node.outputs[i] and (info is None or not info.static or elem_of(info.dtype) is None):
            return Verdict.no(f"output {i} of {node.op_type} must be float32/int32/int64 of known shape")
    for label, infos in (("input", candidate.inputs), ("output", candidate.outputs)):
        for i, info in enumerate(infos):
            if info is not None and info.static:
                size = 4 * max(1, int(np.prod(info.shape, dtype=np.int64)))
                if size > gpu.max_binding:
                    return Verdict.no(f"{label} {i} of {node.op_type} takes {size:,} bytes, more than the adapter's "
                                      f"max_storage_buffer_binding_size ({gpu.max_binding:,})")
    why = module.why_not(candidate)
    return Verdict.no(why) if why else Verdict.yes()


def webgpu_allocate(device: Device, sg: Subgraph) -> None:
    """Plan the subgraph (aliases, fused groups, step order, buffer slots reused by lifetime) and create
    its GPU buffers: one per slot, and a readback buffer per output."""
    gpu = _ready_gpu(device)
    plan = make_plan(sg, gpu.max_buffers)
    sg.device_graph = WebgpuGraph(plan, allocate(gpu, sg, plan))
    sg.stats["webgpu_scratch_bytes"] = plan.intermediate_bytes
    sg.stats["webgpu_unplanned_bytes"] = plan.unplanned_bytes


def webgpu_release(device: Device, sg: Subgraph) -> None:
    """Free the subgraph's GPU buffers."""
    graph = sg.device_graph
    if isinstance(graph, WebgpuGraph):
        graph.memory.destroy()
        graph.program = None


def webgpu_pre_run(device: Device, sg: Subgraph, options) -> None:
    """Upload the weights, lower to WGSL, compile the pipelines and record the dispatches."""
    gpu = _ready_gpu(device)
    if not isinstance(sg.device_graph, WebgpuGraph):
        webgpu_allocate(device, sg)
    graph: WebgpuGraph = sg.device_graph
    gemm = (sg.device_options or WebgpuOptions()).gemm
    graph.program = build(gpu, sg, graph.plan, graph.memory, gpu.cpu_adapter if gemm == "auto" else gemm == "direct")
    sg.stats["webgpu_dispatches"] = len(graph.program.dispatches)
    sg.stats["webgpu_weight_bytes"] = graph.program.weight_bytes
    sg.stats["webgpu_kernels"] = [d.label for d in graph.program.dispatches]


def _count(device: Device, sg: Subgraph, outputs: dict) -> None:
    state: WebgpuState = device.privacy
    moved_in = sum(sg.values[n].nbytes for n in sg.inputs)
    moved_out = sum(v.nbytes for v in outputs.values())
    with state.lock:
        state.runs += 1
        state.bytes_in += moved_in
        state.bytes_out += moved_out
    sg.stats["bytes_in"], sg.stats["bytes_out"] = moved_in, moved_out


def webgpu_run(device: Device, sg: Subgraph) -> None:
    """Write inputs, submit one command buffer, read the outputs into subgraph.values."""
    gpu = _ready_gpu(device)
    graph: WebgpuGraph = sg.device_graph
    program = graph.program
    submit(gpu, sg, program, sg.values, graph.timings is not None)
    outputs = read_outputs(sg, program)
    _add_timings(graph)
    sg.values.update(outputs)
    _count(device, sg, outputs)


def _add_timings(graph: WebgpuGraph) -> None:
    seconds = read_timings(graph.program)
    if seconds is not None and graph.timings is not None and len(graph.timings) == len(seconds):
        graph.timings = [a + b for a, b in zip(graph.timings, seconds)]


def webgpu_profile(device: Device, sg: Subgraph, enable: bool) -> list[NodeTiming] | None:
    """GPU time per dispatch from timestamp queries: on with ``enable``, then one NodeTiming per dispatch
    (a fused group is named by its first node; the kernel is the shader's label). No timestamp-query
    feature on the adapter: every dispatch reads 0 and the scheduler's subgraph time still counts."""
    graph: WebgpuGraph = sg.device_graph
    if enable:
        graph.timings = [0.0] * len(graph.steps)
        return None
    timings, graph.timings = graph.timings, None
    return [NodeTiming(d.node.name if d.node is not None else d.label, d.node.op_type if d.node is not None else "",
                       d.kernel_name, t) for d, t in zip(graph.steps, timings or ())]


def webgpu_async_run(device: Device, sg: Subgraph) -> None:
    """Submit the run and return at once; the device's waiter thread maps the outputs when the queue is done.

    NOTE: wgpu-py resolves a map promise only when someone waits on it, so the waiting is a thread's,
    while the GPU (or lavapipe's threads) runs the command buffer and the host goes on.
    """
    gpu = _ready_gpu(device)
    program = sg.device_graph.program
    submit(gpu, sg, program, sg.values, sg.device_graph.timings is not None)
    program.future = device.privacy.waiter.submit(read_outputs, sg, program)
    with device.privacy.lock:
        device.privacy.async_runs += 1


def webgpu_async_wait(device: Device, sg: Subgraph, try_wait: bool) -> bool:
    """True once the queue finished the run (its outputs are then in subgraph.values)."""
    program = sg.device_graph.program
    future = program.future
    if future is None:
        return True
    if try_wait and not future.done():
        return False
    program.future = None
    outputs = future.result()
    _add_timings(sg.device_graph)
    sg.values.update(outputs)
    _count(device, sg, outputs)
    return True


def webgpu_post_run(device: Device, sg: Subgraph) -> None:
    """Forget run state: a run that was started and never waited for is drained."""
    graph = sg.device_graph
    if isinstance(graph, WebgpuGraph) and graph.program is not None:
        if graph.program.future is not None:
            graph.program.future.result()
            graph.program.future = None
        elif graph.program.pending:
            read_outputs(sg, graph.program)


def webgpu_release_graph(device: Device, device_graph: WebgpuGraph) -> None:
    """Drop the recorded dispatches (buffers went at the allocator's release)."""
    if isinstance(device_graph, WebgpuGraph) and device_graph.program is not None:
        device_graph.program.dispatches.clear()


# ------------------------------------------------------------------ record
WEBGPU_INTERFACE = Interface(
    run=webgpu_run, init=webgpu_init, pre_run=webgpu_pre_run, post_run=webgpu_post_run,
    async_run=webgpu_async_run, async_wait=webgpu_async_wait, release_graph=webgpu_release_graph,
    release_device=webgpu_release_device, profile=webgpu_profile)
WEBGPU_ALLOCATOR = Allocator(describe=webgpu_describe, evaluation=webgpu_evaluation, allocate=webgpu_allocate,
                             release=webgpu_release)


def register_webgpu_device() -> None:
    register_device(Device(name="webgpu", interface=WEBGPU_INTERFACE, allocator=WEBGPU_ALLOCATOR))


def unregister_webgpu_device() -> None:
    unregister_device("webgpu")
