"""The default split: maximal same-device groups, never a cycle (the OpenVINO HETERO diamonds)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import nnhal
from nnhal.optimizer.split import default_split, group_nodes
from nnhal.serializer import load_onnx
from tests.conftest import make_model, vinfo


def _graph(nodes, inputs, outputs):
    return load_onnx(make_model(nodes, [vinfo(n, [4]) for n in inputs], [vinfo(n, [4]) for n in outputs]))


def _acyclic(subgraphs) -> bool:
    producer = {o: sg.index for sg in subgraphs for o in sg.outputs}
    deps = {sg.index: {producer[i] for i in sg.inputs if i in producer} for sg in subgraphs}
    done: set[int] = set()
    for sg in subgraphs:                      # default_split returns producers first
        if not deps[sg.index] <= done:
            return False
        done.add(sg.index)
    return True


def test_unsupported_node_between_two_supported_ones():
    # a -> [b (other device)] -> c, and a -> c directly: merging a and c would wait on itself through b
    g = _graph([helper.make_node("Relu", ["x"], ["a"], name="a"),
                helper.make_node("Neg", ["a"], ["b"], name="b"),
                helper.make_node("Add", ["a", "b"], ["c"], name="c")], ["x"], ["c"])
    sgs = default_split(g, {"a": "npu", "b": "cpu", "c": "npu"})
    assert [(sg.device, [n.name for n in sg.nodes]) for sg in sgs] == [("npu", ["a"]), ("cpu", ["b"]), ("npu", ["c"])]
    assert _acyclic(sgs)


def test_diamond_with_both_arms_on_the_accelerator_merges():
    g = _graph([helper.make_node("Relu", ["x"], ["a"], name="a"),
                helper.make_node("Relu", ["a"], ["l"], name="left"),
                helper.make_node("Neg", ["a"], ["r"], name="right"),
                helper.make_node("Add", ["l", "r"], ["y"], name="join")], ["x"], ["y"])
    sgs = default_split(g, {"a": "npu", "left": "npu", "right": "npu", "join": "npu"})
    assert len(sgs) == 1
    sgs = default_split(g, {"a": "npu", "left": "npu", "right": "cpu", "join": "npu"})
    assert _acyclic(sgs) and len(sgs) == 3


def test_independent_branches_on_one_device_merge():
    g = _graph([helper.make_node("Relu", ["x"], ["a"], name="a"),
                helper.make_node("Neg", ["y"], ["b"], name="b"),
                helper.make_node("Relu", ["b"], ["c"], name="c")], ["x", "y"], ["a", "c"])
    groups = group_nodes(g, {"a": "npu", "b": "cpu", "c": "npu"})
    assert [(d, [n.name for n in ns]) for d, ns in groups] == [("npu", ["a", "c"]), ("cpu", ["b"])] or \
        [(d, [n.name for n in ns]) for d, ns in groups] == [("cpu", ["b"]), ("npu", ["a", "c"])]


@pytest.mark.parametrize("seed", range(30))
def test_random_placements_never_make_a_cycle(seed):
    rng = np.random.default_rng(seed)
    nodes, names = [], ["x"]
    for i in range(12):
        ins = list(rng.choice(names, size=2))
        nodes.append(helper.make_node("Add", ins, [f"t{i}"], name=f"n{i}"))
        names.append(f"t{i}")
    consumed = {i for n in nodes for i in n.input}
    outs = [n for n in names[1:] if n not in consumed]
    g = _graph(nodes, ["x"], outs)
    placement = {f"n{i}": str(rng.choice(["npu", "dsp", "cpu"])) for i in range(12)}
    sgs = default_split(g, placement)
    assert _acyclic(sgs)
    assert sorted(n.name for sg in sgs for n in sg.nodes) == sorted(placement)
    assert all(placement[n.name] == sg.device for sg in sgs for n in sg.nodes)


def test_min_group_size_policy_shows_in_the_report():
    from onnx import numpy_helper
    w = numpy_helper.from_array(np.ones((4, 4, 1, 1), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c1"], name="conv1"),
             helper.make_node("Sigmoid", ["c1"], ["s"], name="sig"),
             helper.make_node("Conv", ["s", "w"], ["c2"], name="conv2"),
             helper.make_node("Relu", ["c2"], ["y"], name="relu2")]
    model = make_model(nodes, [vinfo("x", [1, 4, 3, 3])], [vinfo("y", [1, 4, 3, 3])], [w])
    loose = nnhal.explain(model, devices=["vnpu", "cpu"], precision="uint8")
    assert loose.by_device() == {"vnpu": 3, "cpu": 1} and len(loose.subgraphs) == 3
    tight = nnhal.explain(model, devices=["vnpu", "cpu"], precision="uint8", min_group_size=2)
    assert tight.moved_by_min_group == ["conv1"]
    assert "below min_group_size=2" in tight.decisions[0].reason
    assert "min_group_size=2 moved 1 node(s)" in str(tight)
