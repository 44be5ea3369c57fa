"""Deliberately broken devices for the kit's own tests: one correct host-kernel device, and one variant per
bug a hardware team was seen to ship (issue 25's table), each changing one hook of the correct record."""
from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from nnhal.device.device import Allocator, Candidate, Description, Device, Interface, NodeTiming, Verdict
from nnhal.graph.subgraph import Subgraph
from nnhal.hostkernels.evaluate import evaluate_node

OPS = frozenset({"Relu", "Add", "Mul", "MatMul", "Conv", "Gemm", "Sigmoid"})
WEIGHTED = frozenset({"Conv", "Gemm", "MatMul"})     # ops whose second input is a weight


@dataclass
class State:
    """Device.privacy: the count of compiled graphs alive (the device's own live-object counter)."""

    compiled: int = 0
    cache: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class Compiled:
    """What pre_run builds: the node names, and the buffers some broken variants keep across runs."""

    nodes: list[str]
    buffers: dict[str, np.ndarray] = field(default_factory=dict)


def compute(sg: Subgraph, inputs: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Every tensor the subgraph's nodes produce, by the host reference kernels."""
    inputs = sg.values if inputs is None else inputs
    local: dict[str, np.ndarray] = {}

    def value(name: str) -> np.ndarray | None:
        if not name:
            return None
        if name in local:
            return local[name]
        return inputs[name] if name in inputs else sg.graph.tensors[name].value

    for node in sg.nodes:
        for name, out in zip(node.outputs, evaluate_node(node, [value(n) for n in node.inputs])):
            local[name] = out
    return local


def _init(device: Device) -> None:
    device.privacy = State()


def _pre_run(device: Device, sg: Subgraph, options) -> None:
    sg.device_graph = Compiled([n.name for n in sg.nodes])
    with device.privacy.lock:
        device.privacy.compiled += 1


def _release_graph(device: Device, graph: Compiled) -> None:
    with device.privacy.lock:
        device.privacy.compiled -= 1


def _run(device: Device, sg: Subgraph) -> None:
    out = compute(sg)
    for name in sg.outputs:
        sg.values[name] = out[name]


def _describe(device: Device) -> Description:
    return Description(OPS, ("fp32",), summary="host kernels (the kit's test device)", reentrant=True)


def good(name: str) -> Device:
    """A correct device: host kernels, fresh outputs, balanced lifetime, reentrant."""
    return Device(name, Interface(run=_run, init=_init, pre_run=_pre_run, release_graph=_release_graph),
                  Allocator(describe=_describe))


def _with(device: Device, describe=None, evaluation=None, **hooks) -> Device:
    interface = dataclasses.replace(device.interface, **hooks)
    allocator = dataclasses.replace(device.allocator, describe=describe or device.allocator.describe,
                                    evaluation=evaluation or device.allocator.evaluation)
    return dataclasses.replace(device, interface=interface, allocator=allocator)


# ---------------------------------------------------------------- the bugs
def scaled(name: str) -> Device:
    """Every float output x 1.001."""
    def run(device: Device, sg: Subgraph) -> None:
        out = compute(sg)
        for n in sg.outputs:
            v = out[n]
            sg.values[n] = (v * np.float32(1.001)).astype(v.dtype) if v.dtype.kind == "f" else v
    return _with(good(name), run=run)


def _into_buffers(sg: Subgraph, out: dict[str, np.ndarray]) -> None:
    """Outputs copied into buffers the compiled graph keeps across runs (the buffer reuse of a real driver)."""
    buffers = sg.device_graph.buffers
    for n in sg.outputs:
        if n not in buffers:
            buffers[n] = np.empty_like(out[n])
        np.copyto(buffers[n], out[n])
        sg.values[n] = buffers[n]


def reused_outputs(name: str, declared: bool = False) -> Device:
    """Reentrant, output arrays reused across runs; ``declared``: says so (reuses_outputs=True), a correct device."""
    def run(device: Device, sg: Subgraph) -> None:
        _into_buffers(sg, compute(sg))

    def describe(device: Device) -> Description:
        return dataclasses.replace(_describe(device), reuses_outputs=declared)
    return _with(good(name), describe=describe, run=run)


def shared_staging(name: str) -> Device:
    """Reentrant, but the inputs are staged in buffers of the compiled graph, shared by concurrent runs (the
    transfer to a device takes time: a short sleep between staging and compute)."""
    def run(device: Device, sg: Subgraph) -> None:
        staged = sg.device_graph.buffers
        for n in sg.inputs:
            staged[n] = np.array(sg.values[n])
        time.sleep(0.002)
        out = compute(sg, staged)
        for n in sg.outputs:
            sg.values[n] = out[n]
    return _with(good(name), run=run)


def leaking(name: str) -> Device:
    """release_graph never frees: the compiled graph stays in the device's cache, and its counter up."""
    def release_graph(device: Device, graph: Compiled) -> None:
        device.privacy.cache.append(graph)
    return _with(good(name), release_graph=release_graph)


def wrong_shape(name: str) -> Device:
    """Every output flattened to 1-d (a 0-d tensor comes back as shape (1,))."""
    def run(device: Device, sg: Subgraph) -> None:
        out = compute(sg)
        for n in sg.outputs:
            sg.values[n] = np.reshape(out[n], -1)
    return _with(good(name), run=run)


def profiling(name: str) -> Device:
    """Fills the 1.1-only profile hook (registered as declaring API 1.0 by the test)."""
    def profile(device: Device, sg: Subgraph, enable: bool) -> list[NodeTiming] | None:
        return None if enable else [NodeTiming(n.name, n.op_type, "", 0.0) for n in sg.nodes]
    return _with(good(name), profile=profile)


def missing_output(name: str) -> Device:
    """The last output is never written."""
    def run(device: Device, sg: Subgraph) -> None:
        out = compute(sg)
        for n in sg.outputs[:-1]:
            sg.values[n] = out[n]
    return _with(good(name), run=run)


def uncompiled_op(name: str) -> Device:
    """Describes Sub, but its compiler has no Sub: running one raises."""
    def run(device: Device, sg: Subgraph) -> None:
        missing = [n.name for n in sg.nodes if n.op_type == "Sub"]
        if missing:
            raise NotImplementedError(f"no kernel for Sub (node {missing[0]})")
        _run(device, sg)

    def describe(device: Device) -> Description:
        return dataclasses.replace(_describe(device), ops=OPS | {"Sub"})
    return _with(good(name), describe=describe, run=run)


def failing_pre_run(name: str) -> Device:
    def pre_run(device: Device, sg: Subgraph, options) -> None:
        raise RuntimeError("the vendor compiler rejected the subgraph")
    return _with(good(name), pre_run=pre_run)


def constant_weights_only(name: str) -> Device:
    """Correct, but declines a Conv, Gemm or MatMul whose weight is not a constant (as most NPUs)."""
    def evaluation(device: Device, candidate: Candidate) -> Verdict:
        node = candidate.node
        if node.op_type in WEIGHTED and (len(candidate.inputs) < 2 or candidate.inputs[1] is None
                                         or candidate.inputs[1].value is None):
            return Verdict.no(f"{node.op_type} needs constant weights")
        return Verdict.yes()
    return _with(good(name), evaluation=evaluation)


def declines_conv(name: str) -> Device:
    """Correct, but declines every Conv (it falls back to the CPU)."""
    def evaluation(device: Device, candidate: Candidate) -> Verdict:
        return Verdict.no("no convolution unit") if candidate.node.op_type == "Conv" else Verdict.yes()
    return _with(good(name), evaluation=evaluation)
