"""The default scheduler: dependency-driven, concurrent across async devices, with fallback.

A subgraph starts when every subgraph producing its inputs has finished
(readiness counting, not list order). When other subgraphs are ready or
running, a device offering ``async_run`` / ``async_wait`` is started and
polled, so independent subgraphs on different devices run at the same time;
otherwise (and for devices without async hooks) ``run`` is called inline. Boundary tensors
are converted to the format each device declared (quantize, dequantize,
cast) on the way in and out. A subgraph whose ``pre_run`` or ``run`` fails, or
whose run leaves an output unwritten or of another dtype or shape than inference
gave it (scheduler/outputs.py), is re-placed on the context's fallback
device (the CPU) alone, the failure recorded in the execution's report and
logged as a warning; with ``Options(strict=True)`` the failure is raised.
Whatever the failed device had allocated for that subgraph is released first,
strict or not.

Runs are re-entrant: each works on its own :meth:`Execution.begin` copy and
hands devices their own :meth:`Subgraph.for_run` views. A device that is not
``reentrant`` is entered by one run at a time (scheduler/locks.py).
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

import numpy as np

from nnhal.device.manager import FALLBACK_DEVICE
from nnhal.errors import DeviceError, NnhalError
from nnhal.graph.subgraph import Subgraph
from nnhal.optimizer.boundary import to_device
from nnhal.scheduler.cleanup import Cleanup
from nnhal.scheduler.locks import HeldLocks
from nnhal.scheduler.outputs import check_outputs, take_output
from nnhal.scheduler.scheduler import Execution, Scheduler

log = logging.getLogger("nnhal")
POLL_SECONDS = 50e-6


@dataclass(frozen=True)
class Fallback:
    """A subgraph that failed on its device and now runs on the fallback device."""

    subgraph: int
    device: str
    stage: str
    error: str
    nodes: int
    to: str = FALLBACK_DEVICE

    def describe(self) -> str:
        return (f"subgraph #{self.subgraph} ({self.nodes} nodes) failed on '{self.device}' at {self.stage}: "
                f"{self.error}; re-placed on {self.to}")


# ------------------------------------------------------------------- prerun
def prepare_subgraph(ex: Execution, sg: Subgraph) -> None:
    """allocate then pre_run ``sg`` on its device, recording each success for the release."""
    device = ex.devices[sg.device]
    if device.allocator is not None and device.allocator.allocate is not None:
        device.allocator.allocate(device, sg)
        ex.allocated.add(sg.index)
    if device.interface.pre_run is not None:
        device.interface.pre_run(device, sg, ex.options)
    ex.prepared.add(sg.index)


def release_subgraph(ex: Execution, sg: Subgraph, cleanup: Cleanup) -> None:
    """What ``sg``'s device built and allocated for it: release_graph, then allocator.release."""
    device = ex.devices[sg.device]
    if sg.device_graph is not None and device.interface.release_graph is not None:
        cleanup.call(device.name, "release_graph", device.interface.release_graph, device, sg.device_graph)
    sg.device_graph = None
    ex.prepared.discard(sg.index)
    _release_allocation(ex, sg, cleanup)


def _release_allocation(ex: Execution, sg: Subgraph, cleanup: Cleanup) -> None:
    """allocator.release for ``sg`` when its allocate succeeded and it was not released yet."""
    if sg.index not in ex.allocated:
        return
    ex.allocated.discard(sg.index)
    device = ex.devices[sg.device]
    if device.allocator is not None and device.allocator.release is not None:
        cleanup.call(device.name, "allocator.release", device.allocator.release, device, sg)


def _prerun(ex: Execution) -> None:
    for sg in ex.subgraphs:
        try:
            prepare_subgraph(ex, sg)
        except Exception as exc:
            fall_back(ex, sg, "pre_run", exc)


def fall_back(ex: Execution, sg: Subgraph, stage: str, exc: BaseException, prepare: bool = True) -> None:
    """Re-place one subgraph on the fallback device (or raise when strict / already there).

    What the failed device allocated and built for the subgraph is released first, except after a run
    that fails where it stays (strict, or already on the fallback device): that subgraph stays prepared
    there, so the Session's next run (a row whose values fail a kernel, say an index out of range, is no
    reason to fail every later one) runs it again. With ``prepare`` the fallback device's allocate and
    pre_run run at once (a failure at pre_run or run); without, the subgraph is only re-placed (a
    failure before the scheduler's prerun).
    """
    failed = sg.device
    target = ex.fallback
    stays = ex.options.strict or target is None or failed == target or target not in ex.devices
    if not (stays and stage == "run"):
        cleanup = Cleanup(f"releasing subgraph #{sg.index} after its failure on '{failed}'")
        release_subgraph(ex, sg, cleanup)
        for device, hook, error in cleanup.failures:  # the device is already failing; keep the first error
            log.warning("nnhal: cleaning up after the failure on '%s' failed too: %s raised %s", device, hook,
                        error)
    if stays:
        if isinstance(exc, NnhalError):
            raise exc
        raise DeviceError(f"subgraph #{sg.index} ({len(sg.nodes)} nodes, first '{sg.nodes[0].name}') on device "
                          f"'{failed}': {stage} failed: {type(exc).__name__}: {exc}") from exc
    event = Fallback(sg.index, failed, stage, f"{type(exc).__name__}: {exc}", len(sg.nodes), target)
    ex.report.append(event)
    log.warning("nnhal: %s", event.describe())
    sg.reset_to_fallback(target, ex.graph)
    if prepare:
        prepare_subgraph(ex, sg)


# ---------------------------------------------------------------------- run
def _enter(ex: Execution, sg: Subgraph) -> Subgraph:
    """This run's view of ``sg``, its inputs converted to the device's formats."""
    values, formats = ex.values, sg.input_formats
    if formats:
        local = {}
        for name in sg.inputs:
            fmt = formats.get(name)
            local[name] = to_device(values[name], fmt) if fmt is not None else values[name]
    else:                                          # no device format: the run path's one dict of the inputs
        local = {name: values[name] for name in sg.inputs}
    view = sg.for_run(local)
    ex.views[sg.index] = view
    return view


def _leave(ex: Execution, view: Subgraph) -> None:
    """The outputs of a checked run into the run's values, in host format; copied when the device reuses
    its output buffers (scheduler/outputs.py)."""
    copy = ex.reuses_outputs(view.device)
    for name in view.outputs:
        ex.values[name] = take_output(view, name, (ex.graph or view.graph).tensors[name].dtype, copy)


def _replace_after_failure(ex: Execution, sg: Subgraph, view: Subgraph, exc: BaseException) -> None:
    """A run failed on ``view.device``: re-place the shared subgraph unless another run already did."""
    with ex.lock:
        if sg.device == view.device:
            fall_back(ex, sg, "run", exc)


def _execute_one(ex: Execution, sg: Subgraph) -> None:
    """:func:`_execute` for a graph of one subgraph: nothing to order or overlap with, so no readiness counts,
    no async start and no polling; the same device lock, output checks, fallback and timing."""
    held = None                                      # made only for a device that is not reentrant
    start = time.perf_counter() if ex.timings is not None else 0.0
    try:
        while True:
            name = sg.device
            if not ex.is_reentrant(name):
                held = held or HeldLocks()
                held.enter(name, blocking=True)
            view = _enter(ex, sg)
            device = ex.devices[name]
            try:
                device.interface.run(device, view)
                check_outputs(view)
            except Exception as exc:
                try:
                    _replace_after_failure(ex, sg, view, exc)
                finally:
                    if held is not None:
                        held.release_all()
                continue                             # runs again, on the fallback device
            break
    finally:
        if held is not None:
            held.release_all()
    if ex.timings is not None:
        ex.timings[sg.index] = ex.timings.get(sg.index, 0.0) + time.perf_counter() - start
    _leave(ex, view)


def _direct(ex: Execution, outputs: list[str]) -> Callable[[Execution], list | None] | None:
    """A blocking run of a prepared graph of one subgraph as one call, decided once at prepare (issue 27), or None.

    Taken when the graph is one subgraph on a ``reentrant`` device that declared no boundary formats and keeps no
    output buffers (``reuses_outputs``), and the graph's ``outputs`` are the subgraph's: a run then needs no
    readiness count, device lock, conversion or copy. ``run(execution)`` (a run's :meth:`Execution.begin` copy)
    returns the outputs in order, or None where the general path (:func:`_execute_one`) must run that execution:
    the subgraph was re-placed by a fallback, the run is profiled, or the device failed (then already re-placed as
    the general path does, or the error raised under strict)."""
    if len(ex.subgraphs) != 1:
        return None
    sg = ex.subgraphs[0]
    name = sg.device
    if sg.input_formats or sg.output_formats or not ex.is_reentrant(name) or ex.reuses_outputs(name) \
            or not set(outputs) <= set(sg.outputs):
        return None
    device = ex.devices[name]
    run_hook = device.interface.run
    inputs = tuple(sg.inputs)
    for_run = sg.for_run

    def run(run_ex: Execution) -> list | None:
        # NOTE: read every run: a fallback re-places the shared subgraph, profiling switches timings on
        if sg.device != name or ex.timings is not None:
            return None
        values = run_ex.values
        # NOTE: the run's own values as the view's when they are the subgraph's inputs (the feeds): the device
        # writes the outputs straight into them; an output left there by a failed try is written again by the next
        view = for_run(values if len(values) == len(inputs) else {n: values[n] for n in inputs})
        try:
            run_hook(device, view)
            check_outputs(view)
        except Exception as exc:
            _replace_after_failure(ex, sg, view, exc)
            return None                  # runs again on the fallback device, by the general path
        got = view.values
        result = [got[n] for n in outputs]
        for i, value in enumerate(result):
            if type(value) is not np.ndarray:    # a numpy scalar: as _leave takes it
                result[i] = take_output(view, outputs[i], (ex.graph or view.graph).tensors[outputs[i]].dtype, False)
        return result
    return run


def _execute(ex: Execution) -> None:
    if len(ex.subgraphs) == 1:
        _execute_one(ex, ex.subgraphs[0])
        return
    by_index = {sg.index: sg for sg in ex.subgraphs}
    waiting = {i: len(d) for i, d in ex.dependencies().items()}
    users = ex.users()
    ready = deque(sorted(i for i, n in waiting.items() if n == 0))
    inflight: dict[int, Subgraph] = {}      # index -> the view handed to async_run
    held = HeldLocks()
    finished = 0
    timings = ex.timings
    started: dict[int, float] = {}

    def complete(i: int, view: Subgraph) -> None:
        nonlocal finished
        if timings is not None:
            timings[i] = timings.get(i, 0.0) + time.perf_counter() - started[i]
        _leave(ex, view)
        finished += 1
        for u in users.get(i, ()):
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)

    def enter_device(name: str) -> bool:
        if ex.is_reentrant(name):
            return True
        # NOTE: block only while holding no device lock, so runs cannot deadlock on two devices
        return held.enter(name, blocking=not held.any())

    def leave_device(name: str) -> None:
        if not ex.is_reentrant(name):
            held.leave(name)

    try:
        while finished < len(ex.subgraphs):
            deferred: list[int] = []
            progressed = False
            while ready:
                i = ready.popleft()
                sg = by_index[i]
                name = sg.device
                if not enter_device(name):
                    deferred.append(i)
                    continue
                progressed = True
                if timings is not None and i not in started:
                    started[i] = time.perf_counter()
                view = _enter(ex, sg)
                device = ex.devices[name]
                iface = device.interface
                # NOTE: async only pays when there is something to overlap with
                overlap = bool(ready) or bool(inflight) or bool(deferred)
                try:
                    if overlap and iface.async_run is not None and iface.async_wait is not None:
                        iface.async_run(device, view)
                        inflight[i] = view
                        continue
                    iface.run(device, view)
                    check_outputs(view)
                except Exception as exc:
                    inflight.pop(i, None)
                    try:                         # NOTE: released under the device's lock: no run is inside it
                        _replace_after_failure(ex, sg, view, exc)
                    finally:
                        leave_device(name)
                    ready.appendleft(i)          # runs again, on the fallback device
                    continue
                leave_device(name)
                complete(i, view)
            ready.extend(deferred)
            if not inflight:
                if ready:
                    continue                     # deferred work: no lock held now, so it may block
                if finished < len(ex.subgraphs):
                    raise DeviceError("no subgraph is ready or running, but some have not run: the split has a cycle")
                break
            for i, view in list(inflight.items()):
                device = ex.devices[view.device]
                try:
                    done = device.interface.async_wait(device, view, True)
                    if done:
                        check_outputs(view)
                except Exception as exc:
                    del inflight[i]
                    try:
                        _replace_after_failure(ex, by_index[i], view, exc)
                    finally:
                        leave_device(view.device)
                    ready.appendleft(i)
                    progressed = True
                    continue
                if done:
                    del inflight[i]
                    leave_device(view.device)
                    complete(i, view)
                    progressed = True
            if not progressed:
                time.sleep(POLL_SECONDS)
    finally:
        for i, view in inflight.items():         # an error left runs in flight: let them finish
            device = ex.devices[view.device]
            try:
                device.interface.async_wait(device, view, False)
            except Exception as exc:  # the first error is the one raised
                log.warning("nnhal: waiting for subgraph #%d on '%s' after an error: %s", i, view.device, exc)
        held.release_all()


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
    """post_run and allocator.release for every prepared subgraph; every hook runs even when one raises."""
    cleanup = Cleanup("postrun")
    for sg in ex.subgraphs:
        device = ex.devices[sg.device]
        if sg.index in ex.prepared and device.interface.post_run is not None:
            cleanup.call(device.name, "post_run", device.interface.post_run, device, sg)
        _release_allocation(ex, sg, cleanup)
    cleanup.raise_if_failed()


DEFAULT_SCHEDULER = Scheduler("default", _prerun, _run, _wait, _postrun, _direct)
