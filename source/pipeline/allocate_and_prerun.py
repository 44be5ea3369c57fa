"""Stage: allocation and pre_run. The scheduler (the first device's own, else the default synchronous one)
allocates and prepares every subgraph on its device (``allocator.allocate``, ``interface.pre_run``); a
failing subgraph is re-placed on the fallback device unless strict. After a failed prepare everything it
allocated and built is released, on every device."""
from __future__ import annotations

import logging

from nnhal.device.device import Device
from nnhal.scheduler.cleanup import Cleanup
from nnhal.scheduler.default import DEFAULT_SCHEDULER, release_subgraph
from nnhal.scheduler.scheduler import Execution, Scheduler

log = logging.getLogger("nnhal")


def choose_scheduler(devices: list[Device]) -> Scheduler:
    """The first device's scheduler when it has one, else the default synchronous scheduler."""
    return next((d.scheduler for d in devices[:1] if d.scheduler is not None), DEFAULT_SCHEDULER)


def allocate_and_prerun(ex: Execution, devices: list[Device]) -> Scheduler:
    """Prepare every subgraph of ``ex`` with the chosen scheduler; that scheduler runs them later."""
    scheduler = choose_scheduler(devices)
    scheduler.prerun(ex)
    return scheduler


def release_execution(ex: Execution) -> None:
    """After a failed prepare: release what every subgraph allocated and built (errors logged, the first kept)."""
    cleanup = Cleanup("releasing a failed prerun")
    for sg in ex.subgraphs:
        release_subgraph(ex, sg, cleanup)
    for device, hook, error in cleanup.failures:
        log.warning("nnhal: releasing after a failed prerun: device '%s' hook %s raised %s", device, hook, error)


def release_device_graphs(ex: Execution) -> None:
    """Call release_graph for what each device's pre_run built (every one, even when one raises)."""
    cleanup = Cleanup("releasing the compiled graphs")
    for sg in ex.subgraphs:
        device = ex.devices[sg.device]
        if device.interface.release_graph is not None and sg.device_graph is not None:
            cleanup.call(device.name, "release_graph", device.interface.release_graph, device, sg.device_graph)
        sg.device_graph = None
    cleanup.raise_if_failed()
