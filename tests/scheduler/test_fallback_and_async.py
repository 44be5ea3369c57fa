"""Fallback to the CPU on a failing pre_run or run, strict mode, and concurrency proven by events."""
from __future__ import annotations

import logging
import threading

import numpy as np
import pytest
from onnx import helper

import nnhal
from nnhal.device.device import Allocator, Description, Device, Interface
from nnhal.device.manager import register_device, unregister_device
from tests.conftest import make_model, vinfo


def _compute(sg):
    for node in sg.nodes:
        args = [sg.values[i] if i in sg.values else sg.graph.tensors[i].value for i in node.inputs]
        sg.values[node.outputs[0]] = np.maximum(args[0], 0) if node.op_type == "Relu" else args[0] + args[1]


def faulty_device(name: str, fail_at: str) -> Device:
    """Relu/Add in numpy; raises at pre_run or at run."""
    def pre_run(device, sg, options):
        if fail_at == "pre_run":
            raise RuntimeError("injected pre_run fault")

    def run(device, sg):
        if fail_at == "run":
            raise RuntimeError("injected run fault")
        _compute(sg)

    return Device(name, Interface(run=run, pre_run=pre_run),
                  Allocator(describe=lambda d: Description(frozenset({"Relu", "Add"}), ("fp32",))))


def chain_model():
    return make_model([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                       helper.make_node("Sigmoid", ["a"], ["b"], name="sigmoid"),
                       helper.make_node("Add", ["a", "b"], ["y"], name="add")],
                      [vinfo("x", [8])], [vinfo("y", [8])])


X = np.linspace(-2, 2, 8, dtype=np.float32)
EXPECTED = np.maximum(X, 0) + 1 / (1 + np.exp(-np.maximum(X, 0)))


@pytest.mark.parametrize("stage", ["pre_run", "run"])
def test_failing_subgraph_falls_back_to_cpu(stage, caplog):
    register_device(faulty_device("faulty", stage))
    try:
        with caplog.at_level(logging.WARNING, logger="nnhal"):
            with nnhal.Session(chain_model(), devices=["faulty", "cpu"]) as s:
                y = s.run({"x": X})[0]
                np.testing.assert_allclose(y, EXPECTED, rtol=1e-6)
                assert [(f.device, f.stage) for f in s.fallbacks] == [("faulty", stage), ("faulty", stage)]
                assert all("injected" in f.error for f in s.fallbacks)
                assert "fallback:" in str(s.report())
                y2 = s.run({"x": -X})[0]        # stays on the CPU afterwards
                np.testing.assert_allclose(y2, np.maximum(-X, 0) + 1 / (1 + np.exp(-np.maximum(-X, 0))), rtol=1e-6)
                assert len(s.fallbacks) == 2
        assert "re-placed on cpu" in caplog.text
    finally:
        unregister_device("faulty")


@pytest.mark.parametrize("stage", ["pre_run", "run"])
def test_strict_mode_raises(stage):
    register_device(faulty_device("faulty", stage))
    try:
        model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vinfo("x", [8])], [vinfo("y", [8])])
        with pytest.raises(nnhal.DeviceError, match=f"on device 'faulty': {stage} failed: RuntimeError: injected"):
            with nnhal.Session(model, devices=["faulty"], strict=True) as s:
                s.run({"x": X})
    finally:
        unregister_device("faulty")


def rendezvous_device(name: str, mine: threading.Event, other: threading.Event) -> Device:
    """An async device whose run sets its event and then waits for the other device's event.

    If the scheduler ran the two subgraphs one after the other, the first would wait forever
    (a timeout turns that into an error): finishing proves they ran at the same time.
    """
    state: dict = {}

    def work(sg):
        mine.set()
        if not other.wait(timeout=10):
            raise RuntimeError(f"{name}: the other device never ran concurrently")
        _compute(sg)

    def async_run(device, sg):
        t = threading.Thread(target=work, args=(sg,))
        state[sg.index] = t
        t.start()

    def async_wait(device, sg, try_wait):
        t = state[sg.index]
        t.join(None if not try_wait else 0)
        return not t.is_alive()

    def run(device, sg):
        _compute(sg)

    return Device(name, Interface(run=run, async_run=async_run, async_wait=async_wait),
                  Allocator(describe=lambda d: Description(frozenset({"Relu", "Add"}), ("fp32",))))


def test_independent_branches_overlap_on_two_async_devices():
    ev_a, ev_b = threading.Event(), threading.Event()
    register_device(rendezvous_device("asynca", ev_a, ev_b))
    register_device(rendezvous_device("asyncb", ev_b, ev_a))
    try:
        model = make_model([helper.make_node("Relu", ["x"], ["a"], name="left"),
                            helper.make_node("Relu", ["y"], ["b"], name="right"),
                            helper.make_node("Add", ["a", "b"], ["z"], name="join")],
                           [vinfo("x", [8]), vinfo("y", [8])], [vinfo("z", [8])])
        with nnhal.Session(model, devices=["asynca", "asyncb"], pins={"right": "asyncb", "join": "cpu"}) as s:
            z = s.run({"x": X, "y": -X})[0]
            assert ev_a.is_set() and ev_b.is_set() and not s.fallbacks
        np.testing.assert_allclose(z, np.abs(X))
    finally:
        unregister_device("asyncb")
        unregister_device("asynca")


def test_non_blocking_run_and_wait(relu_add_model):
    ctx = nnhal.create_context("bg", devices=["cpu"])
    g = nnhal.create_graph(ctx, "onnx", relu_add_model)
    x = np.ones((2, 4), np.float32)
    nnhal.set_graph_input(g, "x", x)
    nnhal.prerun_graph(g)
    nnhal.run_graph(g, block=False)
    with pytest.raises(nnhal.StateError, match="already running"):
        nnhal.run_graph(g)
    assert nnhal.wait_graph(g, timeout=30)
    assert nnhal.get_graph_output(g, 0).shape == (2, 4)
    nnhal.destroy_graph(g)
