"""A recording device: numpy Relu/Add with every hook of the record logging its call."""
from __future__ import annotations

import numpy as np

from nnhal.device.device import Allocator, Description, Device, Interface, Optimizer, Verdict
from nnhal.optimizer.split import default_split
from nnhal.scheduler.default import DEFAULT_SCHEDULER
from nnhal.scheduler.scheduler import Scheduler

OPS = {"Relu": lambda a: np.maximum(a, 0), "Add": lambda a, b: a + b}


def make_recording_device(name: str, calls: list) -> Device:
    def hook(label):
        def wrapper(*args):
            calls.append((label, name))
        return wrapper

    def pre_run(device, sg, options):
        calls.append(("pre_run", name))
        sg.device_graph = {"compiled": [n.name for n in sg.nodes]}

    def run(device, sg):
        calls.append(("run", name))
        compute(sg)

    def compute(sg):
        for node in sg.nodes:
            args = [sg.values[i] if i in sg.values else sg.graph.tensors[i].value for i in node.inputs]
            sg.values[node.outputs[0]] = OPS[node.op_type](*args)

    def async_run(device, sg):
        calls.append(("async_run", name))
        compute(sg)

    def async_wait(device, sg, try_wait):
        calls.append(("async_wait", name))
        return True

    def describe(device):
        calls.append(("describe", name))
        return Description(frozenset(OPS), ("fp32",))

    def evaluation(device, cand):
        calls.append(("evaluation", name))
        return Verdict.yes()

    def split_graph(graph, placement):
        calls.append(("split_graph", name))
        return default_split(graph, placement)

    def optimize_graph(sg, precision):
        calls.append(("optimize_graph", name))
        return sg

    def sched(label, fn):
        def wrapper(*args):
            calls.append((label, name))
            return fn(*args)
        return wrapper

    scheduler = Scheduler(f"{name}-sched", sched("scheduler.prerun", DEFAULT_SCHEDULER.prerun),
                          sched("scheduler.run", DEFAULT_SCHEDULER.run), sched("scheduler.wait", DEFAULT_SCHEDULER.wait),
                          sched("scheduler.postrun", DEFAULT_SCHEDULER.postrun))
    return Device(
        name=name,
        interface=Interface(run=run, init=hook("init"), pre_run=pre_run, post_run=hook("post_run"),
                            async_run=async_run, async_wait=async_wait,
                            release_graph=hook("release_graph"), release_device=hook("release_device")),
        allocator=Allocator(describe=describe, evaluation=evaluation, allocate=hook("allocate"), release=hook("release")),
        optimizer=Optimizer(split_graph=split_graph, optimize_graph=optimize_graph),
        scheduler=scheduler,
    )
