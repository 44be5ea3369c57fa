"""The default scheduler: dependency-driven, concurrent across async devices, with CPU fallback.

A subgraph starts when every subgraph producing its inputs has finished
(readiness counting, not list order). When other subgraphs are ready or
running, a device offering ``async_run`` / ``async_wait`` is started and
polled, so independent subgraphs on different devices run at the same time;
otherwise (and for devices without async hooks) ``run`` is called inline. Boundary tensors
are converted to the format each device declared (quantize, dequantize,
cast) on the way in and out. A subgraph whose ``pre_run`` or ``run`` fails is
re-placed on the CPU alone, the failure recorded in the execution's report and
logged as a warning; with ``Options(strict=True)`` the failure is raised.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass

from nnhal.errors import DeviceError, NnhalError
from nnhal.graph.subgraph import Subgraph
from nnhal.optimizer.boundary import to_device, to_host
from nnhal.scheduler.scheduler import Execution, Scheduler

log = logging.getLogger("nnhal")
POLL_SECONDS = 50e-6


@dataclass(frozen=True)
class Fallback:
    """A subgraph that failed on its device and now runs on the CPU."""

    subgraph: int
    device: str
    stage: str
    error: str
    nodes: int

    def describe(self) -> str:
        return (f"subgraph #{self.subgraph} ({self.nodes} nodes) failed on '{self.device}' at {self.stage}: "
                f"{self.error}; re-placed on cpu")


# ------------------------------------------------------------------- prerun
def _prerun(ex: Execution) -> None:
    for sg in ex.subgraphs:
        device = ex.devices[sg.device]
        try:
            if device.allocator is not None and device.allocator.allocate is not None:
                device.allocator.allocate(device, sg)
            if device.interface.pre_run is not None:
                device.interface.pre_run(device, sg, ex.options)
        except Exception as exc:
            fall_back(ex, sg, "pre_run", exc)


def fall_back(ex: Execution, sg: Subgraph, stage: str, exc: BaseException, prepare: bool = True) -> None:
    """Re-place one subgraph on the CPU (or raise when strict / already on the CPU).

    With ``prepare`` the CPU's pre_run runs at once (a failure at pre_run or run);
    without, the subgraph is only re-placed (a failure before the scheduler's prerun).
    """
    failed = ex.devices[sg.device]
    if ex.options.strict or sg.device == "cpu" or "cpu" not in ex.devices:
        if isinstance(exc, NnhalError):
            raise exc
        raise DeviceError(f"subgraph #{sg.index} ({len(sg.nodes)} nodes, first '{sg.nodes[0].name}') on device "
                          f"'{sg.device}': {stage} failed: {type(exc).__name__}: {exc}") from exc
    event = Fallback(sg.index, sg.device, stage, f"{type(exc).__name__}: {exc}", len(sg.nodes))
    ex.report.append(event)
    log.warning("nnhal: %s", event.describe())
    try:
        if failed.interface.release_graph is not None and sg.device_graph is not None:
            failed.interface.release_graph(failed, sg.device_graph)
        if failed.allocator is not None and failed.allocator.release is not None:
            failed.allocator.release(failed, sg)
    except Exception as cleanup:  # the device is already failing; keep the first error
        log.warning("nnhal: cleaning up after the failure on '%s' failed too: %s", failed.name, cleanup)
    sg.device = "cpu"
    sg.device_options = None
    sg.device_graph = None
    sg.input_formats, sg.output_formats = {}, {}
    if sg.original_nodes:
        sg.nodes = list(sg.original_nodes)
    if ex.graph is not None:
        sg.graph = ex.graph         # undo a device's precision rewrite
    sg.precision = "fp32"
    cpu = ex.devices["cpu"]
    if prepare and cpu.interface.pre_run is not None:
        cpu.interface.pre_run(cpu, sg, ex.options)


# ---------------------------------------------------------------------- run
def _cached_users(ex: Execution, deps: dict[int, set[int]]) -> dict[int, list[int]]:
    """Subgraph index -> the subgraphs reading its outputs, computed once per execution."""
    if ex._users is None:
        ex._users = _users(deps)
    return ex._users


def _users(deps: dict[int, set[int]]) -> dict[int, list[int]]:
    users: dict[int, list[int]] = {}
    for i, d in deps.items():
        for j in d:
            users.setdefault(j, []).append(i)
    return users


def _enter(ex: Execution, sg: Subgraph) -> None:
    local = {}
    for name in sg.inputs:
        value = ex.values[name]
        fmt = sg.input_formats.get(name)
        local[name] = to_device(value, fmt) if fmt is not None else value
    sg.values = local


def _leave(ex: Execution, sg: Subgraph) -> None:
    for name in sg.outputs:
        value = sg.values[name]
        fmt = sg.output_formats.get(name)
        host = (ex.graph or sg.graph).tensors[name].dtype
        ex.values[name] = to_host(value, fmt, host) if fmt is not None else value


def _run_on_cpu_after_failure(ex: Execution, sg: Subgraph, exc: BaseException) -> None:
    fall_back(ex, sg, "run", exc)
    _enter(ex, sg)
    cpu = ex.devices["cpu"]
    cpu.interface.run(cpu, sg)


def _execute(ex: Execution) -> None:
    by_index = {sg.index: sg for sg in ex.subgraphs}
    deps = ex.dependencies()
    waiting = {i: len(d) for i, d in deps.items()}
    users = _cached_users(ex, deps)
    ready = deque(sorted(i for i, n in waiting.items() if n == 0))
    inflight: dict[int, Subgraph] = {}
    finished = 0

    timings = ex.timings
    started: dict[int, float] = {}

    def complete(i: int) -> None:
        nonlocal finished
        if timings is not None:
            timings[i] = timings.get(i, 0.0) + time.perf_counter() - started[i]
        _leave(ex, by_index[i])
        finished += 1
        for u in users.get(i, ()):
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)

    while finished < len(ex.subgraphs):
        while ready:
            i = ready.popleft()
            sg = by_index[i]
            device = ex.devices[sg.device]
            if timings is not None:
                started[i] = time.perf_counter()
            _enter(ex, sg)
            iface = device.interface
            # NOTE: async only pays when there is something to overlap with
            overlap = bool(ready) or bool(inflight)
            try:
                if overlap and iface.async_run is not None and iface.async_wait is not None:
                    iface.async_run(device, sg)
                    inflight[i] = sg
                    continue
                iface.run(device, sg)
            except Exception as exc:
                _run_on_cpu_after_failure(ex, sg, exc)
            complete(i)
        if not inflight:
            if finished < len(ex.subgraphs):
                raise DeviceError("no subgraph is ready or running, but some have not run: the split has a cycle")
            break
        progressed = False
        for i, sg in list(inflight.items()):
            device = ex.devices[sg.device]
            try:
                done = device.interface.async_wait(device, sg, True)
            except Exception as exc:
                _run_on_cpu_after_failure(ex, sg, exc)
                done = True
            if done:
                del inflight[i]
                complete(i)
                progressed = True
        if not progressed and not ready:
            time.sleep(POLL_SECONDS)


def _run(ex: Execution, block: bool) -> None:
    if block:
        _execute(ex)
        return
    state: dict = {"error": None}

    def target() -> None:
        try:
            _execute(ex)
        except BaseException as exc:  # handed to wait()
            state["error"] = exc

    thread = threading.Thread(target=target, name="nnhal-run", daemon=True)
    state["thread"] = thread
    ex.state = state
    thread.start()


def _wait(ex: Execution, timeout: float | None) -> bool:
    state = ex.state
    if not state or "thread" not in state:
        return True
    state["thread"].join(timeout)
    if state["thread"].is_alive():
        return False
    ex.state = None
    if state["error"] is not None:
        raise state["error"]
    return True


def _postrun(ex: Execution) -> None:
    for sg in ex.subgraphs:
        device = ex.devices[sg.device]
        if device.interface.post_run is not None:
            device.interface.post_run(device, sg)
        if device.allocator is not None and device.allocator.release is not None:
            device.allocator.release(device, sg)


DEFAULT_SCHEDULER = Scheduler("default", _prerun, _run, _wait, _postrun)
