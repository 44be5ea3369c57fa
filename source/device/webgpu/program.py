"""pre_run's work: lower the planned steps to WGSL launches, create the buffers, upload the weights once,
and record the dispatch sequence (pipeline, bind group, workgroups) that every run replays in one
command buffer."""
from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from nnhal.device.webgpu.f16 import to_f16_storage
from nnhal.device.webgpu.gpu import Gpu, pipeline
from nnhal.device.webgpu.kernels import _eltwise
from nnhal.device.webgpu.kernels.base import Launch, elem_of
from nnhal.device.webgpu.kernels.table import EXPRS, KERNELS
from nnhal.device.webgpu.plan import Plan, Step
from nnhal.errors import DeviceError, wrapped
from nnhal.graph.node import Node
from nnhal.graph.subgraph import Subgraph


@dataclass
class Dispatch:
    label: str
    pipeline: Any
    bind_group: Any
    workgroups: tuple[int, int, int]
    node: Node | None = None          # the first node of the step it computes (for profiles)

    @property
    def kernel_name(self) -> str:
        return self.label


@dataclass
class Program:
    """What pre_run built: buffers by slot, the recorded dispatches, readback buffers of the outputs."""

    plan: Plan
    buffers: list[Any]
    dispatches: list[Dispatch] = field(default_factory=list)
    staging: dict[str, Any] = field(default_factory=dict)
    launches: list[Launch] = field(default_factory=list)
    weight_bytes: int = 0
    pending: bool = False            # a run was submitted and its outputs not read yet
    future: Future | None = None     # an async run's output mapping
    clock: Any = None                # (query set, resolve buffer, readback buffer) while profiling
    timed: bool = False              # the pending run writes timestamps
    half: set[str] = field(default_factory=set)   # tensors held as f16 (precision fp16)


class Lowering:
    """The Emitter kernels write to: shapes, element types and constants of the subgraph's tensors."""

    def __init__(self, sg: Subgraph, direct_gemm: bool) -> None:
        self.sg = sg
        self.direct_gemm = direct_gemm
        self.launches: list[Launch] = []

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(int(d) for d in self.sg.graph.tensors[name].shape)

    def elem(self, name: str) -> str:
        found = elem_of(self.sg.graph.tensors[name].dtype)
        if found is None:
            raise DeviceError(f"webgpu: tensor '{name}' of {self.sg.graph.tensors[name].dtype} has no device type")
        return found

    def is_bool(self, name: str) -> bool:
        return self.sg.graph.tensors[name].dtype == np.bool_

    def value(self, name: str) -> np.ndarray | None:
        t = self.sg.graph.tensors.get(name)
        return t.value if t is not None and t.is_constant else None

    def launch(self, launch: Launch) -> None:
        self.launches.append(launch)


def _lower_step(step: Step, em: Lowering) -> None:
    first = len(em.launches)
    _lower_into(step, em)
    if step.group and step.node is not None:
        # a fused step's launch is named after everything it computes (e.g. MatMul+Add+Div+Erf+Add+Mul+Mul)
        em.launches[first:] = [replace(launch, label=step.label) for launch in em.launches[first:]]


def _lowering_failed(node: Node, exc: Exception) -> DeviceError:
    return DeviceError(f"webgpu: cannot lower node '{node.name}' ({node.op_type}, opset {node.opset}): {exc}")


def _lower_into(step: Step, em: Lowering) -> None:
    with wrapped(lambda exc: _lowering_failed(step.nodes[0], exc)):
        if step.node is None:
            _eltwise.lower_group(step.group, EXPRS, em)
            return
        make = None
        if step.group:
            replace = step.node.outputs[0]

            def make(first):
                return _eltwise.epilogue(step.group, EXPRS, em, replace, first)
        KERNELS[step.node.op_type].lower(step.node, em, make)


def half_tensors(sg: Subgraph) -> set[str]:
    """The tensors held as f16: every float32 tensor of a subgraph at precision fp16."""
    if sg.precision != "fp16":
        return set()
    return {name for name, t in sg.graph.tensors.items() if t.dtype == np.float32}


def host_to_device(value: np.ndarray, half: bool = False) -> np.ndarray:
    """The bytes a tensor has on the device: float32 (float16 when ``half``), or int32 for the integer
    types (range checked) and bool."""
    value = np.asarray(value)
    if value.dtype == np.float32 and half:
        flat = np.ravel(value).astype(np.float16)
        # NOTE: queue writes are whole 4-byte words: an odd count gets one padding half
        return np.concatenate([flat, np.zeros(flat.size % 2, np.float16)])
    if value.dtype == np.float32:
        return np.ascontiguousarray(value)
    if value.dtype == np.bool_:
        return np.ascontiguousarray(value, dtype=np.int32)
    if value.dtype.kind in "iu":
        if value.size and (value.min() < -2 ** 31 or value.max() >= 2 ** 31):
            raise DeviceError("webgpu: an integer tensor holds values outside int32, which the device stores")
        return np.ascontiguousarray(value, dtype=np.int32)
    raise DeviceError(f"webgpu: tensors of {value.dtype} cannot be held on the device")


@dataclass
class Memory:
    """The allocate hook's GPU buffers: one per plan slot, and a readback buffer per output."""

    buffers: list[Any]
    staging: dict[str, Any]

    def destroy(self) -> None:
        for buffer in self.buffers + list(self.staging.values()):
            buffer.destroy()
        self.buffers.clear()
        self.staging.clear()


def allocate(gpu: Gpu, sg: Subgraph, plan: Plan) -> Memory:
    import wgpu

    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    buffers = [gpu.device.create_buffer(size=size, usage=usage) for size in plan.slot_bytes]
    staging = {name: gpu.device.create_buffer(size=plan.slot_bytes[plan.slot[plan.root.get(name, name)]],
                                              usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
               for name in sg.outputs}
    return Memory(buffers, staging)


def build(gpu: Gpu, sg: Subgraph, plan: Plan, memory: Memory, direct_gemm: bool) -> Program:
    """Upload the weights into their buffers, generate and compile the shaders, record the dispatches."""
    em = Lowering(sg, direct_gemm)
    owners: list[Node] = []
    for step in plan.steps:
        _lower_step(step, em)
        owners += [step.nodes[0]] * (len(em.launches) - len(owners))
    half = half_tensors(sg)
    launches = [to_f16_storage(launch, half) for launch in em.launches] if half else em.launches
    buffers = memory.buffers
    weight_bytes = 0
    for name, s in plan.slot.items():
        if plan.kinds[s] == "constant":
            data = host_to_device(sg.graph.tensors[name].value, name in half)
            if data.nbytes:
                with QUEUE_LOCK:
                    gpu.queue.write_buffer(buffers[s], 0, data)
            weight_bytes += data.nbytes
    program = Program(plan, buffers, staging=memory.staging, launches=launches, weight_bytes=weight_bytes, half=half)
    for launch, owner in zip(launches, owners):
        pipe = pipeline(gpu, launch.source)
        entries = [{"binding": i, "resource": {"buffer": buffers[plan.slot[plan.root.get(n, n)]]}}
                   for i, n in enumerate(launch.tensors)]
        group = gpu.device.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=entries)
        program.dispatches.append(Dispatch(launch.label, pipe, group, launch.workgroups, owner))
    return program


def _clock(gpu: Gpu, program: Program) -> Any:
    import wgpu

    if program.clock is None:
        count = 2 * len(program.dispatches)
        program.clock = (gpu.device.create_query_set(type="timestamp", count=count),
                         gpu.device.create_buffer(size=8 * count, usage=wgpu.BufferUsage.QUERY_RESOLVE
                                                  | wgpu.BufferUsage.COPY_SRC),
                         gpu.device.create_buffer(size=8 * count, usage=wgpu.BufferUsage.MAP_READ
                                                  | wgpu.BufferUsage.COPY_DST))
    return program.clock


# NOTE: wgpu-native aborts the process (no Python exception) when one thread maps a buffer while another writes
# or submits on the queue: wgpu 0.32's map_sync submits on the queue itself. Seen under the device kit's hook-order
# check, where an async run's waiter thread reads its outputs while the scheduler submits the next subgraph on
# another thread (test_kit.py, lavapipe, AMD EPYC). Every queue operation and mapping takes this lock: the GPU's
# work still overlaps the host's, only the calls into wgpu-native are one at a time.
QUEUE_LOCK = threading.RLock()


def submit(gpu: Gpu, sg: Subgraph, program: Program, values: dict[str, np.ndarray], timed: bool = False) -> None:
    """Write the boundary inputs, then one command buffer: every dispatch, then the output copies.

    ``timed`` (nnhal.profile, adapters with timestamp-query): one compute pass per dispatch, each
    writing GPU timestamps at its start and end."""
    with QUEUE_LOCK:
        _submit(gpu, sg, program, values, timed)


def _submit(gpu: Gpu, sg: Subgraph, program: Program, values: dict[str, np.ndarray], timed: bool) -> None:
    plan = program.plan
    for name in sg.inputs:
        data = host_to_device(values[name], name in program.half)
        if data.nbytes:
            gpu.queue.write_buffer(program.buffers[plan.slot[plan.root.get(name, name)]], 0, data)
    encoder = gpu.device.create_command_encoder()
    timed = timed and gpu.timestamps and bool(program.dispatches)
    if timed:
        queries, resolved, readback = _clock(gpu, program)
        for i, d in enumerate(program.dispatches):
            cpass = encoder.begin_compute_pass(timestamp_writes={
                "query_set": queries, "beginning_of_pass_write_index": 2 * i, "end_of_pass_write_index": 2 * i + 1})
            cpass.set_pipeline(d.pipeline)
            cpass.set_bind_group(0, d.bind_group)
            cpass.dispatch_workgroups(*d.workgroups)
            cpass.end()
        encoder.resolve_query_set(queries, 0, 2 * len(program.dispatches), resolved, 0)
        encoder.copy_buffer_to_buffer(resolved, 0, readback, 0, readback.size)
    else:
        cpass = encoder.begin_compute_pass()
        for d in program.dispatches:
            cpass.set_pipeline(d.pipeline)
            cpass.set_bind_group(0, d.bind_group)
            cpass.dispatch_workgroups(*d.workgroups)
        cpass.end()
    for name, staging in program.staging.items():
        src = program.buffers[plan.slot[plan.root.get(name, name)]]
        encoder.copy_buffer_to_buffer(src, 0, staging, 0, staging.size)
    gpu.queue.submit([encoder.finish()])
    program.pending = True
    program.timed = timed


def read_timings(program: Program) -> list[float] | None:
    """Seconds each dispatch of the last timed run took on the GPU (None when it was not timed)."""
    if not program.timed:
        return None
    readback = program.clock[2]
    with QUEUE_LOCK:
        readback.map_sync("READ")
        try:
            stamps = np.frombuffer(readback.read_mapped(copy=True), np.uint64).astype(np.float64)
        finally:
            readback.unmap()
    program.timed = False
    return list((stamps[1::2] - stamps[0::2]) * 1e-9)


def read_outputs(sg: Subgraph, program: Program) -> dict[str, np.ndarray]:
    """Map the readback buffers (waits for the submitted work) into host arrays of the graph's dtypes."""
    out = {}
    for name, staging in program.staging.items():
        t = sg.graph.tensors[name]
        with QUEUE_LOCK:
            if staging.map_state != "mapped":
                staging.map_sync("READ")
            try:
                raw = staging.read_mapped(copy=True)
            finally:
                staging.unmap()
        dev = (np.float16 if name in program.half else np.float32) if elem_of(t.dtype) == "f32" else np.int32
        count = int(np.prod(t.shape, dtype=np.int64)) if t.shape else 1
        arr = np.frombuffer(raw, dtype=dev, count=count).reshape(t.shape)
        out[name] = arr.astype(t.dtype, copy=True) if arr.dtype != t.dtype else arr.copy()
    program.pending = False
    return out
