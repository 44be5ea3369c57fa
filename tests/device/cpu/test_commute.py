"""An activation after a DepthToSpace / SpaceToDepth runs before it, folded into the convolution that feeds it
(device/cpu/commute.py hoist_activations, then fusions.fuse_activations): ESPCN's Conv -> PixelShuffle -> Clip.
Graphs as torch exports them (odd channel counts, batch 2, DCR and CRD) against onnxruntime within the bound of
the convolution's reordered sums; the activation step is gone, and it stays where the permuted tensor has another
reader or the convolution's output leaves the graph."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.conformance.tolerance import assert_within_bound, gamma

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")

SHAPE = (2, 5, 7, 9)


def _model(op: str, attrs: dict, act: str, extra: str = "", values=None, shape=SHAPE):
    """Conv (5 -> 27 channels, 3x3 padded) -> ``op`` -> ``act``; ``extra``: "permuted" adds a second reader of
    the permuted tensor (a Sigmoid, a second output), "conv" makes the convolution's output a graph output."""
    rng = np.random.default_rng(8)
    values = values or {"w": rng.standard_normal((27, 5, 3, 3)) * 0.2, "b": rng.standard_normal(27) * 0.3}
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in values.items()]
    act_inputs = ["p"]
    if act == "Clip":
        inits += [numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
                  numpy_helper.from_array(np.array(1.0, np.float32), "hi")]
        act_inputs += ["lo", "hi"]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node(op, ["c"], ["p"], **attrs),
             helper.make_node(act, act_inputs, ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra == "permuted":
        nodes.append(helper.make_node("Sigmoid", ["p"], ["s"]))
        outputs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, None))
    if extra == "conv":
        outputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "commute", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), values


def _ort(model, x):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})


CASES = {
    "pixelshuffle-dcr-clip": ("DepthToSpace", dict(blocksize=3, mode="DCR"), "Clip"),
    "pixelshuffle-crd-clip": ("DepthToSpace", dict(blocksize=3, mode="CRD"), "Clip"),
    "depth-to-space-relu": ("DepthToSpace", dict(blocksize=3), "Relu"),
}


@pytest.mark.parametrize("extra", ["", "permuted", "conv"], ids=["hoisted", "permuted-read-twice", "conv-output"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_activation_runs_in_the_convolution(case, extra):
    op, attrs, act = CASES[case]
    model, values = _model(op, attrs, act, extra)
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = s.run({"x": x})
        (plan,) = [sg.device_graph for sg in s.graph.execution.subgraphs]
    ops = [st.node.op_type for st in plan.steps]
    assert (act in ops) == bool(extra)
    want = _ort(model, x)
    magnitude = _ort(_model(op, attrs, "Relu", extra, {k: np.abs(v) for k, v in values.items()})[0], np.abs(x))
    for g, w, m in zip(got, want, magnitude):
        assert_within_bound(g, w, 2 * gamma(5 * 9 + 1) * m)


def test_space_to_depth_commutes_too():
    shape = (2, 5, 6, 9)
    model, values = _model("SpaceToDepth", dict(blocksize=3), "Relu", shape=shape)
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run({"x": x})[0]
        (plan,) = [sg.device_graph for sg in s.graph.execution.subgraphs]
    assert "Relu" not in [st.node.op_type for st in plan.steps]
    want = _ort(model, x)[0]
    magnitude = _ort(_model("SpaceToDepth", dict(blocksize=3), "Relu", "", {k: np.abs(v) for k, v in values.items()},
                            shape)[0], np.abs(x))[0]
    assert_within_bound(got, want, 2 * gamma(5 * 9 + 1) * magnitude)
