"""gc_paused (scheduler/gcpause.py): the collector is off inside, nested and across threads, and back in
its former state afterwards; prepare runs under it."""
from __future__ import annotations

import gc
import threading

import numpy as np
from onnx import TensorProto, helper

import nnhal
from nnhal.scheduler.gcpause import gc_paused


def test_nested_pauses_restore_the_collector_once():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_switched_off_by_the_application_stays_off():
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_last_thread_to_leave_switches_it_back_on():
    inside, release = threading.Event(), threading.Event()

    def hold():
        with gc_paused():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    inside.wait(10)
    with gc_paused():
        pass
    assert not gc.isenabled()          # the other thread is still inside
    release.set()
    t.join(10)
    assert gc.isenabled()


def test_prepare_runs_with_the_collector_paused(monkeypatch):
    seen = []
    from nnhal.optimizer import passes

    monkeypatch.setattr(passes, "PASSES", passes.PASSES + [("probe", lambda g: seen.append(gc.isenabled()) or 0)])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with nnhal.Session(model, devices=["cpu"]) as s:
        np.testing.assert_array_equal(s.run({"x": np.array([-1, 2], np.float32)})[0], [0, 2])
    assert seen == [False] and gc.isenabled()
