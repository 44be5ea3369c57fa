"""The device kit (nnhal.testing) passes good devices and fails wrong ones with a useful message."""
from __future__ import annotations

import dataclasses

import pytest

from nnhal import testing
from nnhal.device.manager import register_device, unregister_device
from tests.device.recording import full_device


@pytest.fixture
def wrong():
    """The full recording-test device, but its Relu lets negative values through."""
    def run(device, sg):
        for node in sg.nodes:
            args = [sg.values[i] if i in sg.values else sg.graph.tensors[i].value for i in node.inputs]
            sg.values[node.outputs[0]] = args[0] if node.op_type == "Relu" else args[0] + args[1]

    device = full_device("wrong")
    register_device(dataclasses.replace(device, interface=dataclasses.replace(device.interface, run=run,
                                                                              async_run=run)))
    yield "wrong"
    unregister_device("wrong")


@pytest.fixture
def good():
    register_device(full_device("good"))
    yield "good"
    unregister_device("good")


def test_a_good_device_passes_every_check(good):
    cases = testing.conformance_cases(good)
    names = {c.name for c in cases}
    assert "test_relu" in names and "test_add" in names
    assert all({n.op_type for n in c.model.graph.node} <= {"Relu", "Add"} for c in cases)
    testing.check_case(good, next(c for c in cases if c.name == "test_relu"))
    testing.check_hook_order(good)
    testing.check_boundaries(good)
    testing.check_fallback(good)
    testing.check_concurrent_runs(good)


def test_a_wrong_device_fails_conformance_and_boundaries(wrong):
    relu = next(c for c in testing.conformance_cases(wrong, ["Relu"]) if c.name == "test_relu")
    with pytest.raises(AssertionError, match="test_relu on 'wrong' at fp32: wrong: output 0"):
        testing.check_case(wrong, relu)
    with pytest.raises(AssertionError, match="output 0 on 'wrong' at fp32 differs from the CPU's"):
        testing.check_boundaries(wrong)


def test_call_order_check_reports_missing_and_misordered_hooks():
    calls = [("init", "d"), ("describe", "d"), ("pre_run", "d"), ("run", "d"), ("post_run", "d")]
    testing.check_call_order(calls, ["init", "describe", "pre_run", "run", "post_run"])
    with pytest.raises(AssertionError, match=r"never called: \['release_graph'\]"):
        testing.check_call_order(calls, ["init", "pre_run", "release_graph"])
    with pytest.raises(AssertionError, match="'pre_run' was first called before 'allocate'"):
        testing.check_call_order(calls + [("allocate", "d")], ["allocate", "pre_run"])


def test_recording_copy_logs_every_filled_hook_under_its_name():
    calls: list = []
    copy = testing.recording(full_device("orig"), calls, "copy")
    copy.interface.init(copy)
    copy.scheduler.postrun(type("Ex", (), {"subgraphs": []})())
    assert copy.name == "copy" and calls == [("init", "copy"), ("scheduler.postrun", "copy")]
    assert testing.filled_hooks(copy) == list(testing.LIFECYCLE)


def test_a_device_without_a_binary_op_skips_the_boundary_check_with_the_reason():
    from nnhal.device.device import Allocator, Description, Device, Interface

    register_device(Device("unary", Interface(run=lambda d, sg: None),
                           Allocator(describe=lambda d: Description(frozenset({"Relu"})))))
    try:
        with pytest.raises(pytest.skip.Exception, match="describes none of"):
            testing.check_boundaries("unary")
    finally:
        unregister_device("unary")
