"""register_device checks the whole record first; a failed registration changes nothing."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper

import nnhal
from nnhal.device.device import Allocator, Description, Device, Interface, Optimizer
from nnhal.device.manager import register_device, registered_devices, unregister_device
from nnhal.errors import DeviceError, RegistryError
from nnhal.graph.subgraph import Subgraph
from nnhal.optimizer.split import check_split, default_split
from nnhal.serializer import load_onnx
from tests.conftest import make_model, vinfo
from tests.device.recording import full_device


def _run(device, sg):
    for node in sg.nodes:
        sg.values[node.outputs[0]] = np.maximum(sg.values[node.inputs[0]], 0)


def _describe(device):
    return Description(frozenset({"Relu"}), ("fp32",))


def plain(name="plain", **interface) -> Device:
    return Device(name, Interface(run=_run, **interface), Allocator(describe=_describe))


def names() -> list[str]:
    return [d.name for d in registered_devices()]


@pytest.mark.parametrize("device, message", [
    (Device("norun", Interface(run=None), Allocator(describe=_describe)), "no interface.run hook"),
    (Device("noalloc", Interface(run=_run)), "has no allocator"),
    (Device("nodesc", Interface(run=_run), Allocator(describe=None)), "no allocator.describe"),
    (plain(async_run=_run), "fills interface.async_run but not interface.async_wait"),
    (plain(async_wait=lambda d, sg, t: True), "fills interface.async_wait but not interface.async_run"),
    (plain(pre_run="compile"), "interface.pre_run must be a function, got str"),
    (Device("badtable", {"run": _run}, Allocator(describe=_describe)), "must be a nnhal Interface record, got dict"),
    (Device("badopt", Interface(run=_run), Allocator(describe=_describe), optimizer=Optimizer(split_graph=3)),
     "optimizer.split_graph must be a function, got int"),
    (plain(name="Bad-Name"), r"\[a-z0-9\]\+"),
    (plain(name=""), r"\[a-z0-9\]\+"),
    ("cpu", "needs a nnhal Device record, got str"),
    (Device("baddesc", Interface(run=_run), Allocator(describe=lambda d: {"Relu"})), "must return a nnhal Description"),
    (Device("badprec", Interface(run=_run), Allocator(describe=lambda d: Description(frozenset({"Relu"}), ("fp64",)))),
     r"precisions \('fp64',\) must be"),
])
def test_malformed_records_are_refused_and_change_nothing(device, message):
    before = names()
    with pytest.raises(RegistryError, match=message):
        register_device(device)
    assert names() == before


def test_init_hook_that_raises_changes_nothing():
    def init(device):
        raise RuntimeError("no hardware")

    before = names()
    with pytest.raises(RegistryError, match="'flaky': init hook failed: RuntimeError: no hardware"):
        register_device(plain("flaky", init=init))
    assert names() == before
    with pytest.raises(DeviceError, match="no device named 'flaky'"):
        nnhal.create_context("c", devices=["flaky"])


def test_describe_failing_after_init_undoes_init():
    released = []
    device = Device("undo", Interface(run=_run, init=lambda d: None, release_device=lambda d: released.append(d.name)),
                    Allocator(describe=lambda d: 1 / 0))
    with pytest.raises(RegistryError, match="describe hook failed: ZeroDivisionError"):
        register_device(device)
    assert released == ["undo"] and "undo" not in names()


def test_a_valid_record_registers():
    register_device(plain("fine"))
    try:
        assert "fine" in names()
    finally:
        unregister_device("fine")


# ------------------------------------------------------------------ custom split
def _chain():
    return load_onnx(make_model([helper.make_node("Relu", ["x"], ["a"], name="a"),
                                 helper.make_node("Relu", ["a"], ["b"], name="b"),
                                 helper.make_node("Relu", ["b"], ["c"], name="c")],
                                [vinfo("x", [4])], [vinfo("c", [4])]))


PLACED = {"a": "npu", "b": "cpu", "c": "npu"}


def _split(mutate):
    graph = _chain()
    sgs = default_split(graph, PLACED)
    mutate(graph, sgs)
    return graph, sgs


def test_the_default_split_passes_the_check():
    graph, sgs = _split(lambda g, s: None)
    check_split("npu", graph, PLACED, sgs)


def _drop(g, s):
    s[2].nodes.clear()


def _twice(g, s):
    s[0].nodes.append(s[2].nodes[0])


def _mixed(g, s):
    s[0].nodes.append(s[1].nodes.pop())


def _undeclared(g, s):
    s[1].inputs.clear()


@pytest.mark.parametrize("mutate, message", [
    (_drop, r"node\(s\) \['c'\] are in no subgraph"),
    (_twice, "node 'c' \\(Relu\\) is in subgraphs #0 and #2"),
    (_mixed, "node 'b' \\(Relu\\) is placed on 'cpu' but sits in subgraph #0 on 'npu'"),
    (_undeclared, "tensor 'a' flows from subgraph #0 to #1 but is not in the outputs of the one and the inputs"),
    (lambda g, s: s.__setitem__(1, "oops"), "expected a list of Subgraph"),
    (lambda g, s: setattr(s[1], "index", 0), r"subgraph indices \[0, 0, 2\] are not unique"),
])
def test_invalid_custom_splits_name_the_device(mutate, message):
    graph, sgs = _split(mutate)
    with pytest.raises(DeviceError, match="device 'npu': split_graph returned an invalid split: " + message):
        check_split("npu", graph, PLACED, sgs)


def test_cyclic_split_is_refused():
    graph = _chain()
    placed = {"a": "npu", "b": "cpu", "c": "npu"}
    a, b, c = graph.nodes
    # a and c in one npu subgraph, b on cpu: npu needs b's output, cpu needs npu's a -> cycle
    sgs = [Subgraph(0, graph, [a, c], ["x", "b"], ["a", "c"], "npu"), Subgraph(1, graph, [b], ["a"], ["b"], "cpu")]
    with pytest.raises(DeviceError, match="device 'npu': .*in a cycle"):
        check_split("npu", graph, placed, sgs)


def test_a_session_refuses_a_device_whose_split_drops_a_node():
    def split_graph(graph, placement):
        sgs = default_split(graph, placement)
        sgs[-1].nodes.pop()
        return sgs

    device = full_device("badsplit")
    register_device(dataclasses.replace(device, optimizer=Optimizer(split_graph=split_graph)))
    try:
        model = make_model([helper.make_node("Relu", ["x"], ["a"], name="r1"),
                            helper.make_node("Relu", ["a"], ["y"], name="r2")], [vinfo("x", [4])], [vinfo("y", [4])])
        with pytest.raises(DeviceError, match=r"device 'badsplit': split_graph returned an invalid split: "
                                              r"node\(s\) \['r2'\] are in no subgraph"):
            with nnhal.Session(model, devices=["badsplit"]) as s:
                s.run({"x": np.ones(4, np.float32)})
    finally:
        unregister_device("badsplit")


def test_a_scheduler_missing_a_hook_is_refused():
    device = dataclasses.replace(full_device("halfsched"),
                                 scheduler=dataclasses.replace(full_device("x").scheduler, wait=None))
    with pytest.raises(RegistryError, match="'halfsched': its scheduler lacks a callable wait"):
        register_device(device)
