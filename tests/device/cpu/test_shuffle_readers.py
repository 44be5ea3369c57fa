"""A channel shuffle whose producer cannot take it (a Concat: ShuffleNet v2's block end) and whose only readers are
group-1 convolutions is folded into their weights' input channels (device/cpu/fusions.py _unpermute_readers): no
Gather, Reshape or Transpose runs. A depthwise reader, or the shuffled tensor leaving the graph, keeps the Gather.
Against onnxruntime.

Tolerance: the permutation moves values exactly; each convolution output sums K = C * KH * KW products in another
order than onnxruntime, so the two differ by at most 2 (K - 1) 2^-24 sum |w x| <= 2 K^2 2^-24 max|w| max|x|."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")

H, W = 9, 7


def _model(n: int, c1: int, c2: int, groups: int, readers: str):
    """x -> MaxPool (c1 channels) and Conv (c1 -> c2) -> Concat -> shuffle in ``groups`` -> readers: "convs" (a
    1x1 and a strided, padded, dilated 3x3, both group 1), "depthwise" (the 1x1 and a depthwise 3x3) or "output"
    (the 1x1, and the shuffled tensor is a graph output too)."""
    c = c1 + c2
    rng = np.random.default_rng(c * 3 + groups)

    def f(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    inits = [f("w0", c2, c1, 1, 1), f("w1", 6, c, 1, 1), f("b1", 6),
             numpy_helper.from_array(np.array([n, groups, c // groups, H, W], np.int64), "shape5"),
             numpy_helper.from_array(np.array([n, c, H, W], np.int64), "shape4")]
    nodes = [helper.make_node("MaxPool", ["x"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w0"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
             helper.make_node("Reshape", ["cat", "shape5"], ["r5"]),
             helper.make_node("Transpose", ["r5"], ["t5"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t5", "shape4"], ["shuf"]),
             helper.make_node("Conv", ["shuf", "w1", "b1"], ["y1"])]
    outputs = ["y1"]
    if readers == "convs":
        inits.append(f("w2", 5, c, 3, 3))
        nodes.append(helper.make_node("Conv", ["shuf", "w2"], ["y2"], strides=[2, 2], pads=[1, 2, 1, 0],
                                      dilations=[2, 1]))
        outputs.append("y2")
    elif readers == "depthwise":
        inits.append(f("w2", c, 1, 3, 3))
        nodes.append(helper.make_node("Conv", ["shuf", "w2"], ["y2"], pads=[1, 1, 1, 1], group=c))
        outputs.append("y2")
    else:
        outputs.append("shuf")
    graph = helper.make_graph(nodes, "shuffle_readers",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, (n, c1, H, W))],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), inits


@pytest.mark.parametrize("checked", [False, True], ids=["generated", "checked"])
@pytest.mark.parametrize("n,c1,c2,groups,readers", [
    (1, 6, 6, 2, "convs"),          # ShuffleNet v2's two groups
    (2, 5, 7, 3, "convs"),          # odd channel counts, three groups, batch 2
    (1, 4, 4, 4, "convs"),          # four groups
    (2, 5, 7, 3, "depthwise"),      # a depthwise reader: the Gather stays
    (1, 6, 6, 2, "output"),         # the shuffled tensor leaves the graph: the Gather stays
])
def test_a_shuffle_read_only_by_group1_convolutions_is_folded_into_their_weights(monkeypatch, checked, n, c1, c2,
                                                                                 groups, readers):
    if checked:
        monkeypatch.setenv("NNHAL_CHECK", "1")
    model, inits = _model(n, c1, c2, groups, readers)
    x = np.random.default_rng(n + c1).standard_normal((n, c1, H, W)).astype(np.float32)
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run({"x": x})
        steps = [st for sg in s.graph.execution.subgraphs for st in sg.device_graph.steps]
    ops = [st.node.op_type for st in steps]
    assert "Reshape" not in ops and "Transpose" not in [st.node.op_type for st in steps
                                                         if not st.kernel_name.startswith("to-")], ops
    assert ops.count("Gather") == (0 if readers == "convs" else 1), ops
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    w_max = max(float(np.abs(numpy_helper.to_array(i)).max()) for i in inits if i.name.startswith("w"))
    x_max = float(np.abs(x).max()) * max(1.0, c1 * w_max)      # the Concat's inputs: x's maxima and a 1x1 of x
    k = (c1 + c2) * 9
    for g, ref in zip(got, want):
        assert g.shape == ref.shape
        np.testing.assert_allclose(g, ref, rtol=0, atol=2 * k * k * 2.0 ** -24 * w_max * x_max + 1e-7)
