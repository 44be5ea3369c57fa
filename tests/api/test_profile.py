"""nnhal.profile: where a run's time goes, per subgraph and per node."""
from __future__ import annotations

import numpy as np
import pytest

import nnhal
from nnhal.zoo import input_for, resolve


def _squeezenet():
    import onnx

    model = resolve("zoo:squeezenet?weights=random")
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(model)
    return proto, input_for(proto, seed=0)


def test_cpu_profile_times_every_node_and_switches_off_afterwards():
    model, feeds = _squeezenet()
    with nnhal.Session(model, devices=["cpu"]) as s:
        want = s.run(feeds)[0]
        prof = s.profile(feeds, runs=3)
        assert prof.runs == 3 and prof.wall_ms > 0
        (sg,) = prof.subgraphs
        assert sg.device == "cpu" and sg.ms > 0
        plan = s.subgraphs[0].device_graph
        # one timed entry per step of the compiled plan, named after the step's node and kernel
        assert [(n.node, n.kernel) for n in prof.nodes] == [(st.node.name, st.kernel_name) for st in plan.steps]
        assert sum(n.ms for n in prof.nodes) > 0
        ops = {op for _, op, _, _, _ in prof.by_op()}
        assert {"Conv", "MaxPool", "Concat"} <= ops
        assert "by op and kernel" in prof.table() and "slowest" in prof.table(top=5)
        assert plan.timings is None and s.graph.execution.timings is None
        np.testing.assert_array_equal(s.run(feeds)[0], want)


def test_profile_on_two_devices_times_each_subgraph():
    model, feeds = _squeezenet()
    with nnhal.Session(model, devices=["vnpu", "cpu"], precision="uint8") as s:
        prof = s.profile(feeds, runs=1, warmup=0)
    assert {sg.device for sg in prof.subgraphs} == {"vnpu", "cpu"}
    assert all(sg.ms > 0 for sg in prof.subgraphs)
    assert {n.device for n in prof.nodes} == {"cpu"}        # the vnpu times subgraphs, not nodes


def test_profile_refuses_bad_counts_and_unprepared_graphs():
    model, feeds = _squeezenet()
    with nnhal.Session(model, devices=["cpu"]) as s:
        with pytest.raises(nnhal.InputError, match="runs >= 1"):
            s.profile(feeds, runs=0)
    ctx = nnhal.create_context("profile-test", devices=["cpu"])
    g = nnhal.create_graph(ctx, "onnx", model)
    with pytest.raises(nnhal.StateError):
        nnhal.profile(g, runs=1, warmup=0)


def test_a_device_profile_hook_supplies_the_node_times():
    """The core reads node times only through Interface.profile: switched on, then off with the records."""
    from onnx import helper

    from nnhal.device.device import Allocator, Description, Device, Interface, NodeTiming
    from nnhal.device.manager import register_device, unregister_device
    from tests.conftest import make_model, vinfo

    calls: list[bool] = []

    def run(device, sg):
        sg.values[sg.outputs[0]] = np.abs(sg.values[sg.inputs[0]])

    def profile(device, sg, enable):
        calls.append(enable)
        return None if enable else [NodeTiming(sg.nodes[0].name, "Abs", "whole", 0.006)]

    register_device(Device("timed", Interface(run=run, pre_run=lambda d, sg, o: setattr(sg, "device_graph", "plan"),
                                              profile=profile),
                           Allocator(describe=lambda d: Description(frozenset({"Abs"}), ("fp32",))), None, None))
    try:
        model = make_model([helper.make_node("Abs", ["x"], ["y"], name="abs")], [vinfo("x", [3])], [vinfo("y", [3])])
        with nnhal.Session(model, devices=["timed"]) as s:
            prof = s.profile({"x": np.array([-1, 2, -3], np.float32)}, runs=3, warmup=1)
    finally:
        unregister_device("timed")
    assert calls == [True, False]
    (node,) = prof.nodes
    assert (node.device, node.node, node.op, node.kernel) == ("timed", "abs", "Abs", "whole")
    assert node.ms == pytest.approx(0.006 / 3 * 1e3)
