"""A recording device: numpy Relu/Add filling every hook of the record, each call logged (nnhal.testing)."""
from __future__ import annotations

import numpy as np

from nnhal.device.device import Allocator, Description, Device, Interface, Optimizer, Verdict
from nnhal.optimizer.split import default_split
from nnhal.scheduler.default import DEFAULT_SCHEDULER
from nnhal.testing import recording

OPS = {"Relu": lambda a: np.maximum(a, 0), "Add": lambda a, b: a + b}


def _nothing(*args) -> None:
    return None


def _pre_run(device, sg, options):
    sg.device_graph = {"compiled": [n.name for n in sg.nodes]}


def _run(device, sg):
    for node in sg.nodes:
        args = [sg.values[i] if i in sg.values else sg.graph.tensors[i].value for i in node.inputs]
        sg.values[node.outputs[0]] = OPS[node.op_type](*args)


def full_device(name: str) -> Device:
    """A device filling every hook; run and async_run compute, the other hooks do nothing visible."""
    return Device(
        name=name,
        interface=Interface(run=_run, init=_nothing, pre_run=_pre_run, post_run=_nothing, async_run=_run,
                            async_wait=lambda device, sg, try_wait: True, release_graph=_nothing,
                            release_device=_nothing),
        allocator=Allocator(describe=lambda device: Description(frozenset(OPS), ("fp32",)),
                            evaluation=lambda device, cand: Verdict.yes(), allocate=_nothing, release=_nothing),
        optimizer=Optimizer(split_graph=default_split, optimize_graph=lambda sg, precision: sg),
        scheduler=DEFAULT_SCHEDULER,
    )


def make_recording_device(name: str, calls: list) -> Device:
    return recording(full_device(name), calls)
