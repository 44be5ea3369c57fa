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


def _branch_model():
    """The whole graph inside one If (both branches: MatMul -> Relu -> Transpose)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def branch(tag: str, scale: float):
        w = numpy_helper.from_array(np.full((8, 8), scale, np.float32), f"{tag}_w")
        nodes = [helper.make_node("MatMul", ["x", f"{tag}_w"], [f"{tag}_m"], name=f"{tag}_matmul"),
                 helper.make_node("Relu", [f"{tag}_m"], [f"{tag}_r"], name=f"{tag}_relu"),
                 helper.make_node("Transpose", [f"{tag}_r"], [f"{tag}_y"], name=f"{tag}_transpose", perm=[1, 0])]
        return helper.make_graph(nodes, tag, [], [helper.make_tensor_value_info(f"{tag}_y", TensorProto.FLOAT,
                                                                                 [8, 8])], [w])

    node = helper.make_node("If", ["c"], ["y"], name="whole", then_branch=branch("then", 1.0),
                            else_branch=branch("else", -1.0))
    graph = helper.make_graph([node], "if", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                             helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def test_profile_breaks_control_flow_bodies_out_into_their_own_rows():
    from nnhal.profiling import CATEGORIES, CONTROL, KERNEL, MOVEMENT

    x = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    feeds = {"c": np.array(True), "x": x}
    with nnhal.Session(_branch_model(), devices=["cpu"]) as s:
        prof = s.profile(feeds, runs=2)
        rows = {n.node: n for n in prof.nodes}
        # the taken branch's steps are rows of their own; the If keeps only its own bookkeeping
        assert {"whole", "then_matmul", "then_transpose"} <= set(rows)
        assert not any(name.startswith("else_") for name in rows)
        body = sum(n.ms for n in prof.nodes if n.node != "whole")
        assert sum(n.ms for n in prof.nodes) <= prof.accounted_ms * 1.01 and body > 0
        cov = prof.coverage()
        assert set(cov) == set(CATEGORIES) and abs(sum(cov.values()) - 1) < 1e-9
        assert cov[KERNEL] > 0 and cov[MOVEMENT] > 0 and cov[CONTROL] > 0
        assert "coverage:" in prof.table()
        # profiling is off again: the next profile sees no stale body rows
        np.testing.assert_allclose(s.run(feeds)[0], np.maximum(x @ np.ones((8, 8), np.float32), 0).T, rtol=1e-6)
        assert {n.node for n in s.profile({"c": np.array(False), "x": x}, runs=1).nodes} >= {"whole", "else_matmul"}


def test_coverage_categories():
    from nnhal.profiling import CONTROL, KERNEL, LAYOUT, MOVEMENT, REFERENCE, category

    assert category("Transpose", "to-nhwc") == LAYOUT and category("Transpose", "reference") == MOVEMENT
    assert category("Cast", "reference") == MOVEMENT and category("Loop", "reference") == CONTROL
    assert category("MatMul", "reference") == KERNEL and category("Conv", "gemm") == KERNEL
    assert category("LSTM", "reference") == REFERENCE and category("LSTM", "fast") == KERNEL
    assert category("SomeNewOp", "reference") == REFERENCE
    # a reference kernel that applies a fused activation is still reference time
    assert category("ConvTranspose", "reference+activation") == REFERENCE
