"""Description.performance in placement: Options(prefer="speed" | "power") picks, among the devices that
accept a node, the lowest exec_time / power_usage at its precision; "order" (the default) keeps the
priority list; pins win."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import nnhal
from nnhal.device.device import Allocator, Description, Device, Interface, Performance
from nnhal.device.manager import register_device, unregister_device
from tests.conftest import make_model, vinfo


def _relu(device, sg):
    for node in sg.nodes:
        sg.values[node.outputs[0]] = np.maximum(sg.values[node.inputs[0]], 0)


def _device(name: str, exec_time: float | None, power: float | None) -> Device:
    perf = {} if exec_time is None else {"fp32": Performance(exec_time=exec_time, power_usage=power)}
    return Device(name, Interface(run=_relu),
                  Allocator(describe=lambda d: Description(frozenset({"Relu"}), ("fp32",), performance=perf)),
                  None, None)


@pytest.fixture
def devices():
    nnhal.init()
    made = [_device("quick", 0.2, 0.9), _device("frugal", 0.5, 0.1), _device("plain", None, None)]
    for d in made:
        register_device(d)
    yield
    for d in reversed(made):
        unregister_device(d.name)


MODEL = make_model([helper.make_node("Relu", ["x"], ["y"], name="act")], [vinfo("x", [4])], [vinfo("y", [4])])
X = np.array([-1, 2, -3, 4], np.float32)


@pytest.mark.parametrize("prefer, want", [("order", "plain"), ("speed", "quick"), ("power", "frugal")])
def test_prefer_picks_by_the_devices_performance(devices, prefer, want):
    with nnhal.Session(MODEL, devices=["plain", "frugal", "quick"], prefer=prefer) as s:
        np.testing.assert_array_equal(s.run({"x": X})[0], np.maximum(X, 0))
        decision = s.placement["act"]
    assert decision.device == want
    if prefer != "order":
        assert f"prefer={prefer}" in decision.reason and "plain 1" in decision.reason
        assert set(decision.declined) >= {"plain"}


def test_ties_keep_the_priority_order_and_pins_win(devices):
    with nnhal.Session(MODEL, devices=["plain", "cpu"], prefer="speed") as s:    # both count as 1.0
        s.run({"x": X})
        assert s.placement["act"].device == "plain"
    with nnhal.Session(MODEL, devices=["quick", "frugal"], prefer="speed", pins={"act": "frugal"}) as s:
        s.run({"x": X})
        assert s.placement["act"].device == "frugal"


def test_an_unknown_preference_is_an_options_error():
    with pytest.raises(nnhal.OptionsError, match="prefer must be one of order, speed, power"):
        nnhal.Options(prefer="fastest")
