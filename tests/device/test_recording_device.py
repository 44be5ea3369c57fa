"""The core calls every hook a device fills, at the moment its name says, in order."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import nnhal
from nnhal.device.manager import register_device, unregister_device
from nnhal.errors import RegistryError
from nnhal.testing import LIFECYCLE, check_call_order, first_calls
from tests.conftest import make_model, vinfo
from tests.device.recording import make_recording_device


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
            profile = s.profile({"x": x, "y": y}, runs=2, warmup=0)
            # the recording device's profile hook returns no node timings: the scheduler's times remain
            assert {t.device for t in profile.subgraphs} == {"reca", "recb", "cpu"}
            assert {t.device for t in profile.nodes} == {"cpu"}
    finally:
        unregister_device("recb")
        unregister_device("reca")
    assert sorted(first_calls(calls)) == sorted(LIFECYCLE)
    check_call_order(calls, list(LIFECYCLE))    # which of run/async_run comes first is checked below
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
