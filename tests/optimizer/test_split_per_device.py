"""Per-device splits: each device's split_graph groups only its own nodes, the rest get the default split
(optimizer/split.py split_per_device), through the public API with two splitting devices in one context."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import nnhal
from nnhal.device.device import Allocator, Description, Device, Interface, Optimizer
from nnhal.device.manager import register_device, unregister_device
from nnhal.errors import DeviceError
from nnhal.graph.subgraph import Subgraph
from nnhal.optimizer.split import subgraphs_of
from tests.testing.broken import compute

OPS = frozenset({"Relu", "Add"})


def _run(device, sg):
    out = compute(sg)
    for name in sg.outputs:
        sg.values[name] = out[name]


def singletons(graph, placement) -> list[Subgraph]:
    """A split_graph putting every node alone in its subgraph (every device's nodes)."""
    return subgraphs_of(graph, [(placement[n.name], [n]) for n in graph.nodes])


def _device(name: str, split, calls: list) -> Device:
    def split_graph(graph, placement):
        calls.append(name)
        return split(graph, placement)
    return Device(name, Interface(run=_run), Allocator(describe=lambda d: Description(OPS)),
                  Optimizer(split_graph=split_graph))


@pytest.fixture
def two_splitters():
    """'splita' splits into single nodes; 'splitb' splits by the default rule (and would group splita's nodes)."""
    from nnhal.optimizer.split import default_split

    calls: list[str] = []
    register_device(_device("splita", singletons, calls))
    register_device(_device("splitb", default_split, calls))
    yield calls
    unregister_device("splitb")
    unregister_device("splita")


def _chain():
    nodes = [helper.make_node("Relu", ["x"], ["a1"], name="a1"), helper.make_node("Relu", ["a1"], ["a2"], name="a2"),
             helper.make_node("Add", ["a2", "x"], ["b1"], name="b1"),
             helper.make_node("Add", ["b1", "a1"], ["b2"], name="b2"),
             helper.make_node("Relu", ["b2"], ["c1"], name="c1"), helper.make_node("Relu", ["c1"], ["c2"], name="c2")]
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("x", "c2")]
    return helper.make_model(helper.make_graph(nodes, "chain", info[:1], info[1:]),
                             opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("order", [["splita", "splitb"], ["splitb", "splita"]])
def test_each_device_splits_only_its_own_nodes(two_splitters, order):
    pins = {"a1": "splita", "a2": "splita", "b1": "splitb", "b2": "splitb", "c1": "cpu", "c2": "cpu"}
    x = np.array([-1, 0, 2], np.float32)
    with nnhal.Session(_chain(), devices=order, pins=pins) as s:
        y = s.run({"x": x})[0]
        groups = sorted((sg.device, [n.name for n in sg.nodes]) for sg in s.subgraphs)
    assert sorted(two_splitters) == ["splita", "splitb"]        # both split_graphs were called
    assert groups == [("cpu", ["c1", "c2"]), ("splita", ["a1"]), ("splita", ["a2"]), ("splitb", ["b1", "b2"])]
    r = np.maximum(x, 0)
    np.testing.assert_array_equal(y, np.maximum(r + x + r, 0))


def test_a_split_that_cannot_run_as_one_subgraph_names_the_device():
    """splitc groups c1 and c3 although c2 (on the cpu) sits between them."""
    def around(graph, placement):
        nodes = {n.name: n for n in graph.nodes}
        alone = subgraphs_of(graph, [("splitc", [nodes["c1"]]), ("cpu", [nodes["c2"]]), ("splitc", [nodes["c3"]])])
        return [Subgraph(0, graph, [nodes["c1"], nodes["c3"]], ["x", "c2"], ["c1", "c3"], "splitc"), alone[1]]

    register_device(_device("splitc", around, []))
    try:
        nodes = [helper.make_node("Relu", ["x"], ["c1"], name="c1"),
                 helper.make_node("Relu", ["c1"], ["c2"], name="c2"),
                 helper.make_node("Add", ["c2", "x"], ["c3"], name="c3")]
        info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("x", "c3")]
        model = helper.make_model(helper.make_graph(nodes, "g", info[:1], info[1:]),
                                  opset_imports=[helper.make_opsetid("", 17)])
        with pytest.raises(DeviceError, match="device 'splitc': split_graph returned an invalid split: .*cycle"):
            with nnhal.Session(model, devices=["splitc"], pins={"c2": "cpu"}) as s:
                s.run({"x": np.ones(3, np.float32)})
    finally:
        unregister_device("splitc")
