"""The per-convolution table's model reading (benchmarks/conv_table.py): shapes, onnxruntime's fused names, halves."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.benchmarks import load_script


@pytest.fixture(scope="module")
def table():
    return load_script("conv_table.py", "conv_table_benchmark")


def _model():
    """x (1, 3, 17, 17) -> Conv 3x3 s2 (5 out) -> Relu -> a; a -> Conv 1x1 (5 out) + a -> Relu -> y."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((5, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((5, 5, 1, 1)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="first", kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["a"], name="relu1"),
             helper.make_node("Conv", ["a", "w2"], ["c2"], name="second", kernel_shape=[1, 1]),
             helper.make_node("Add", ["c2", "a"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y"], name="relu2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 17, 17])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_conv_shapes_reads_each_convolution(table):
    shapes = table.conv_shapes(_model())
    assert set(shapes) == {"first", "second"}
    first, second = shapes["first"], shapes["second"]
    assert (first["cin"], first["cout"], first["k"], first["s"], first["hw"], first["ohw"]) == (3, 5, "3x3", 2,
                                                                                                 "17x17", "9x9")
    assert first["macs"] == 9 * 9 * 5 * 3 * 3 * 3
    assert (second["k"], second["ohw"], second["macs"]) == ("1x1", "9x9", 9 * 9 * 5 * 5)
    assert {first["path"], second["path"]} <= {"direct", "1x1", "im2col", "grouped", "depthwise", "shift"}


def test_fused_node_names_lead_back_to_their_convolution(table):
    find = table.conv_of_output(_model())
    assert find("c1") == "first"
    assert find("a") == "first"            # Conv + Relu: named by the Relu's output
    assert find("y") == "second"           # Conv + Add + Relu: the Add's Conv input, not the skip's producer
    assert find("x") is None               # a graph input has no producer


def test_held_out_models_are_refused(table, monkeypatch):
    from corpus import registry  # benchmarks/ is on sys.path once conv_table is loaded

    loaded = []
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        monkeypatch.delenv(var, raising=False)   # else main re-executes the process without them
    monkeypatch.setattr(registry, "half_of", lambda name: "heldout")
    monkeypatch.setattr(registry, "load", lambda name: loaded.append(name))
    with pytest.raises(SystemExit):
        table.main(["--models", "any_model"])
    assert loaded == []                  # refused before its file is opened
