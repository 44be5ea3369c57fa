"""The core calls every hook a device fills, at the moment its name says, in order."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import nnhal
from nnhal.device.manager import register_device, unregister_device
from nnhal.errors import RegistryError
from tests.conftest import make_model, vinfo
from tests.device.recording import make_recording_device

ALL_HOOKS = ["init", "describe", "evaluation", "split_graph", "optimize_graph", "scheduler.prerun", "allocate",
             "pre_run", "scheduler.run", "async_run", "async_wait", "run", "scheduler.postrun", "post_run",
             "release", "release_graph", "release_device"]


def first_calls(calls, device=None):
    """Hook labels in the order of their first call (optionally for one device)."""
    seen = []
    for label, dev in calls:
        if (device is None or dev == device) and label not in seen:
            seen.append(label)
    return seen


def two_branch_model():
    """a = relu(x); b = relu(y); s = a + b; z = relu(s): two independent branches, a join, a tail."""
    return make_model([helper.make_node("Relu", ["x"], ["a"], name="left"),
                       helper.make_node("Relu", ["y"], ["b"], name="right"),
                       helper.make_node("Add", ["a", "b"], ["s"], name="join"),
                       helper.make_node("Relu", ["s"], ["z"], name="tail")],
                      [vinfo("x", [4]), vinfo("y", [4])], [vinfo("z", [4])])


def test_every_hook_of_the_record_is_called_in_order():
    calls: list = []
    register_device(make_recording_device("reca", calls))
    register_device(make_recording_device("recb", calls))
    try:
        x = np.array([-1, 2, -3, 4], np.float32)
        y = np.array([5, -6, 7, -8], np.float32)
        pins = {"right": "recb", "join": "cpu"}
        with nnhal.Session(two_branch_model(), devices=["reca", "recb"], pins=pins) as s:
            z = s.run({"x": x, "y": y})[0]
            np.testing.assert_array_equal(z, np.maximum(x, 0) + np.maximum(y, 0))
            assert [s.placement[n].device for n in ("left", "right", "join", "tail")] == ["reca", "recb", "cpu", "reca"]
    finally:
        unregister_device("recb")
        unregister_device("reca")
    order = first_calls(calls)
    assert sorted(order) == sorted(ALL_HOOKS)
    # the lifecycle order of first calls
    for earlier, later in zip(ALL_HOOKS, ALL_HOOKS[1:]):
        if {earlier, later} & {"async_run", "async_wait", "run"}:
            continue  # which of the three comes first depends on readiness, checked below
        assert order.index(earlier) < order.index(later), (earlier, later, order)
    # the two independent branches ran through async_run; the tail, alone, through run
    runs = [(label, dev) for label, dev in calls if label in ("run", "async_run")]
    assert runs[:2] == [("async_run", "reca"), ("async_run", "recb")] and runs[-1] == ("run", "reca")
    assert calls[-1] == ("release_device", "reca")


def test_duplicate_names_are_refused():
    calls: list = []
    register_device(make_recording_device("dup", calls))
    try:
        with pytest.raises(RegistryError, match="already registered"):
            register_device(make_recording_device("dup", calls))
    finally:
        unregister_device("dup")


def test_malformed_name_is_refused():
    with pytest.raises(RegistryError, match=r"\[a-z0-9\]\+"):
        register_device(make_recording_device("Bad-Name", []))


def test_init_is_idempotent_and_registers_cpu():
    nnhal.init()
    nnhal.init()
    names = [d.name for d in nnhal.devices()]
    assert names.count("cpu") == 1
