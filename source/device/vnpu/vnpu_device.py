"""vnpu: a simulated integer NPU, written as the template a hardware team copies.

It models a real accelerator honestly: its own memory (tensors are copied in
and out, and the bytes counted), a compile step at pre_run that packs weights
into its layout, uint8 asymmetric activations with int8 symmetric per-channel
weights and int32 biases, integer arithmetic with fixed-point
requantization, a limited op set with the limits of a real chip, and an
asynchronous queue (one worker thread). It runs no floating-point op.

The module reads top to bottom: options and state, the hooks, the record,
register / unregister. README.md in this folder walks through every field.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from nnhal.device.device import Allocator, Candidate, Description, Device, Interface, Optimizer, Performance, Verdict
from nnhal.device.manager import register_device, unregister_device
from nnhal.device.vnpu import ops
from nnhal.device.vnpu.compiler import Program, compile_subgraph
from nnhal.device.vnpu.rules import RULES, why_not
from nnhal.errors import DeviceError
from nnhal.graph.subgraph import Format, Subgraph


# ------------------------------------------------------------ options, state
@dataclass(frozen=True)
class VnpuOptions:
    """device_options={"vnpu": {...}}."""

    memory_mb: float = 256.0     # device memory; a subgraph that does not fit fails (and falls back to the CPU)
    trace: bool = False          # keep every uint8 tensor of the last run in subgraph.stats["trace"]

    def __post_init__(self) -> None:
        if not isinstance(self.memory_mb, (int, float)) or self.memory_mb <= 0:
            raise ValueError(f"memory_mb must be a positive number, got {self.memory_mb!r}")
        if not isinstance(self.trace, bool):
            raise ValueError(f"trace must be True or False, got {self.trace!r}")


@dataclass
class VnpuState:
    """The device's private state (Device.privacy)."""

    used_bytes: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    runs: int = 0
    worker: ThreadPoolExecutor | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class VnpuGraph:
    """What pre_run builds (Subgraph.device_graph): the program and its device memory."""

    program: Program
    memory: np.ndarray
    views: dict[str, np.ndarray]
    future: Future | None = None


def _options(sg: Subgraph) -> VnpuOptions:
    return sg.device_options or VnpuOptions()


# ------------------------------------------------------------------- hooks
def vnpu_init(device: Device) -> None:
    """At registration: the state and the command queue (one worker thread)."""
    device.privacy = VnpuState(worker=ThreadPoolExecutor(max_workers=1, thread_name_prefix="vnpu"))


def vnpu_release_device(device: Device) -> None:
    """At unregistration: drain and stop the queue."""
    device.privacy.worker.shutdown(wait=True)


def vnpu_describe(device: Device) -> Description:
    """Ops and the one precision the chip runs, its options, and NNAPI-style performance figures."""
    return Description(
        ops=frozenset(RULES),
        precisions=("uint8",),
        performance={"uint8": Performance(exec_time=0.25, power_usage=0.1)},
        options=VnpuOptions,
        summary="simulated integer NPU (uint8 activations, int8 per-channel weights)",
        # NOTE: the chip's activations are uint8 with the scales the core calibrated; it cannot quantize
        # at run time, so the core declines it the products that need dynamic scales (placement says why).
        activation_quantization=("static",),
    )


def vnpu_evaluation(device: Device, candidate: Candidate) -> Verdict:
    """Accept the node if the chip supports its op, dtypes and attributes; else say why not."""
    why = why_not(candidate)
    return Verdict.no(why) if why else Verdict.yes()


def vnpu_optimize_graph(sg: Subgraph, precision: str) -> Subgraph:
    """Declare uint8 boundaries with the calibrated parameters; the core converts to and from them."""
    for names, formats in ((sg.inputs, sg.input_formats), (sg.outputs, sg.output_formats)):
        for name in names:
            t = sg.graph.tensors[name]
            if t.quant is None:
                raise DeviceError(f"vnpu: boundary tensor '{name}' has no quantization parameters; "
                                  f"the vnpu runs precision uint8, not {precision}")
            formats[name] = Format(np.dtype(np.uint8), t.quant)
    return sg


def _activation_bytes(sg: Subgraph) -> int:
    names = {n for node in sg.nodes for n in node.inputs + node.outputs if n and not sg.graph.tensors[n].is_constant}
    return sum(int(np.prod(sg.graph.tensors[n].shape)) for n in names)


def _weight_bytes(sg: Subgraph) -> int:
    return sum(int(sg.graph.tensors[n].value.size) for node in sg.nodes for n in node.inputs[1:]
               if n and sg.graph.tensors[n].is_constant and sg.graph.tensors[n].value.dtype.kind == "f")


def vnpu_allocate(device: Device, sg: Subgraph) -> None:
    """Reserve device memory for the subgraph's uint8 tensors and int8 weights."""
    need = _activation_bytes(sg) + _weight_bytes(sg)
    capacity = int(_options(sg).memory_mb * (1 << 20))
    state: VnpuState = device.privacy
    with state.lock:
        if state.used_bytes + need > capacity:
            raise DeviceError(f"vnpu: out of device memory: subgraph #{sg.index} needs {need:,} bytes, "
                              f"{capacity - state.used_bytes:,} of {capacity:,} free")
        state.used_bytes += need
    sg.allocation = need


def vnpu_release(device: Device, sg: Subgraph) -> None:
    """Give the reserved device memory back."""
    state: VnpuState = device.privacy
    with state.lock:
        state.used_bytes -= sg.allocation or 0
    sg.allocation = None


def vnpu_pre_run(device: Device, sg: Subgraph, options) -> None:
    """Compile: lower to integer instructions, pack weights, lay tensors out in device memory."""
    program = compile_subgraph(sg)
    consts = {n for i in program.instructions for n in i.params.get("consts", {})}
    names = [n for n in program.shapes if n not in consts]
    sizes = [int(np.prod(program.shapes[n])) for n in names]
    memory = np.empty(max(sum(sizes), 1), np.uint8)
    views, offset = {}, 0
    for name, size in zip(names, sizes):
        views[name] = memory[offset:offset + size].reshape(program.shapes[name])
        offset += size
    sg.device_graph = VnpuGraph(program, memory, views)
    sg.stats["vnpu_instructions"] = [f"{i.kind}:{i.node}" for i in program.instructions]
    sg.stats["vnpu_weight_bytes"] = program.weight_bytes


def vnpu_run(device: Device, sg: Subgraph) -> None:
    """Copy inputs in, execute the instructions on device memory, copy outputs out."""
    vg: VnpuGraph = sg.device_graph
    state: VnpuState = device.privacy
    moved_in = moved_out = 0
    for name in vg.program.inputs:
        np.copyto(vg.views[name], sg.values[name])
        moved_in += vg.views[name].nbytes
    for ins in vg.program.instructions:
        consts = ins.params.get("consts", {})
        args = [consts[n] if n in consts else vg.views[n] for n in ins.inputs]
        np.copyto(vg.views[ins.output], ops.EXECUTE[ins.kind](ins, *args))
    for name in vg.program.outputs:
        sg.values[name] = vg.views[name].copy()
        moved_out += vg.views[name].nbytes
    if _options(sg).trace:
        sg.stats["trace"] = {n: v.copy() for n, v in vg.views.items()}
    with state.lock:
        state.bytes_in += moved_in
        state.bytes_out += moved_out
        state.runs += 1
    sg.stats["bytes_in"], sg.stats["bytes_out"] = moved_in, moved_out


def vnpu_async_run(device: Device, sg: Subgraph) -> None:
    """Queue the run on the device's worker and return at once."""
    sg.device_graph.future = device.privacy.worker.submit(vnpu_run, device, sg)


def vnpu_async_wait(device: Device, sg: Subgraph, try_wait: bool) -> bool:
    """True when the queued run finished (its error, if any, is raised here)."""
    future = sg.device_graph.future
    if future is None:
        return True
    if try_wait and not future.done():
        return False
    sg.device_graph.future = None
    future.result()
    return True


def vnpu_post_run(device: Device, sg: Subgraph) -> None:
    """Forget run state (trace, pending future); the compiled program stays for the next pre_run."""
    sg.stats.pop("trace", None)
    if sg.device_graph is not None:
        sg.device_graph.future = None


def vnpu_release_graph(device: Device, device_graph: VnpuGraph) -> None:
    """Free the program and its device memory."""
    device_graph.views.clear()


# ------------------------------------------------------------------ record
VNPU_INTERFACE = Interface(
    run=vnpu_run, init=vnpu_init, pre_run=vnpu_pre_run, post_run=vnpu_post_run, async_run=vnpu_async_run,
    async_wait=vnpu_async_wait, release_graph=vnpu_release_graph, release_device=vnpu_release_device)
VNPU_ALLOCATOR = Allocator(describe=vnpu_describe, evaluation=vnpu_evaluation, allocate=vnpu_allocate,
                           release=vnpu_release)
VNPU_OPTIMIZER = Optimizer(optimize_graph=vnpu_optimize_graph)


def register_vnpu_device() -> None:
    register_device(Device(name="vnpu", interface=VNPU_INTERFACE, allocator=VNPU_ALLOCATOR, optimizer=VNPU_OPTIMIZER))


def unregister_vnpu_device() -> None:
    unregister_device("vnpu")
