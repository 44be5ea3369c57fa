"""The default scheduler: dependency-driven, synchronous per device.

Subgraphs run when every subgraph producing their inputs has finished
(readiness counting, not list order). A device that only offers
``async_run`` / ``async_wait`` is started and waited for.
"""
from __future__ import annotations

from collections import deque

from nnhal.errors import DeviceError
from nnhal.scheduler.scheduler import Execution, Scheduler


def _prerun(ex: Execution) -> None:
    for sg in ex.subgraphs:
        device = ex.devices[sg.device]
        if device.allocator is not None and device.allocator.allocate is not None:
            device.allocator.allocate(device, sg)
        if device.interface.pre_run is not None:
            device.interface.pre_run(device, sg, ex.options)


def _run_one(ex: Execution, index: int) -> None:
    sg = ex.subgraphs[index]
    device = ex.devices[sg.device]
    sg.values = ex.values
    iface = device.interface
    if iface.run is not None:
        iface.run(device, sg)
    elif iface.async_run is not None and iface.async_wait is not None:
        iface.async_run(device, sg)
        iface.async_wait(device, sg, False)
    else:
        raise DeviceError(f"device '{device.name}' offers neither run nor async_run/async_wait")


def order(ex: Execution) -> list[int]:
    """Subgraph indices in an order where producers come before consumers."""
    deps = ex.dependencies()
    waiting = {i: len(d) for i, d in deps.items()}
    users: dict[int, list[int]] = {}
    for i, d in deps.items():
        for j in d:
            users.setdefault(j, []).append(i)
    ready = deque(sorted(i for i, n in waiting.items() if n == 0))
    result = []
    while ready:
        i = ready.popleft()
        result.append(i)
        for u in users.get(i, ()):
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
    if len(result) != len(ex.subgraphs):
        raise DeviceError("the subgraphs depend on each other in a cycle; the split is wrong")
    return result


def _run(ex: Execution, block: bool) -> None:
    if ex.state is None or ex.state.get("order_for") is not ex.subgraphs:
        ex.state = {"order": order(ex), "order_for": ex.subgraphs}
    by_index = {sg.index: pos for pos, sg in enumerate(ex.subgraphs)}
    for i in ex.state["order"]:
        _run_one(ex, by_index[i])


def _wait(ex: Execution, timeout: float | None) -> bool:
    return True


def _postrun(ex: Execution) -> None:
    for sg in ex.subgraphs:
        device = ex.devices[sg.device]
        if device.interface.post_run is not None:
            device.interface.post_run(device, sg)
        if device.allocator is not None and device.allocator.release is not None:
            device.allocator.release(device, sg)


DEFAULT_SCHEDULER = Scheduler("sync", _prerun, _run, _wait, _postrun)
