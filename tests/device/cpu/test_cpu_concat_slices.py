"""Concat without copies: the CPU planner places a Concat's inputs inside its output buffer (plan.concat_slices),
channel slices of a channels-last output included, where the producer's kernel writes into such a view."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import plan as cpu_plan

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")

SHAPE = (2, 8, 12, 12)


def _model(extra_outputs=(), reread=False, relu_after=False):
    """Three branches into one channel Concat: MaxPool and AveragePool (kernels that write channel slices)
    and a strided 1x1 Conv; ``extra_outputs`` also leave the graph, ``reread`` reads the AveragePool twice,
    ``relu_after`` puts a Relu between the Concat and its Conv (ShuffleNet's)."""
    rng = np.random.default_rng(3)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["ar"]),
        helper.make_node("MaxPool", ["ar"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "wb"], ["b"], pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["b"], ["q"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                         count_include_pad=1),
        helper.make_node("Conv", ["x", "wc"], ["r"], strides=[2, 2]),
        helper.make_node("Concat", ["p", "q", "r"], ["cat"], axis=1),
        helper.make_node("Relu", ["cat"], ["catr"]) if relu_after else helper.make_node("Identity", ["cat"], ["catr"]),
        helper.make_node("Conv", ["catr", "wd"], ["y"]),
    ]
    inits = [w("wa", 16, 8, 3, 3), w("wb", 24, 8, 3, 3), w("wc", 8, 8, 1, 1), w("wd", 4, 48, 1, 1)]
    outputs = ["y", *extra_outputs]
    if reread:
        nodes.append(helper.make_node("Conv", ["q", "we"], ["z"]))
        inits.append(w("we", 4, 24, 1, 1))
        outputs.append("z")
    graph = helper.make_graph(nodes, "slices", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _run(model, x):
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run({"x": x})
        (plan,) = [sg.device_graph for sg in s.graph.execution.subgraphs]
        return got, plan


@pytest.mark.parametrize("variant", ["plain", "pool-is-an-output", "pool-read-twice"])
def test_channel_slices_match_the_copying_concat_and_onnxruntime(monkeypatch, variant):
    model = _model(extra_outputs=["p"] if variant == "pool-is-an-output" else (), reread=variant == "pool-read-twice")
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    got, plan = _run(model, x)
    pools = {st.node.op_type: st for st in plan.steps if st.node.op_type in ("MaxPool", "AveragePool")}
    assert {st.kernel_name for st in pools.values()} == {"nhwc"}
    p, q = (pools[op].node.outputs[0] for op in ("MaxPool", "AveragePool"))
    # a pool output leaving the graph is stored NCHW, so is the Concat (batch 2: no contiguous blocks); the
    # strided 1x1 Conv's output "r" (the direct kernel) is written in place too (test_conv_concat_slices.py)
    expected = {"plain": {p, q, "r"}, "pool-is-an-output": set(), "pool-read-twice": {p, "r"}}[variant]
    assert set(plan.memory.strides) == expected
    (concat,) = [st for st in plan.steps if st.node.op_type == "Concat"]
    for name in expected:
        assert plan.memory.tensors[name].root == concat.node.outputs[0]
    with monkeypatch.context() as m:
        m.setattr(cpu_plan, "concat_slices", lambda *args: ({}, {}))
        copied, plain_plan = _run(model, x)
    assert not plain_plan.memory.strides
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, c, w in zip(got, copied, want):
        np.testing.assert_array_equal(g, c)
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_a_second_run_and_a_concurrent_arena_see_the_same_slices():
    """Every arena of the plan's pool lays the slices out alike: two runs in flight agree with one."""
    model = _model()
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    with nnhal.Session(model, devices=["cpu"]) as s:
        first = s.run({"x": x})[0]
        (plan,) = [sg.device_graph for sg in s.graph.execution.subgraphs]
        spare = plan.pool.pop()                 # as if another run held the first arena
        second = s.run({"x": x})[0]
        plan.pool.append(spare)
    np.testing.assert_array_equal(first, second)


def test_a_relu_after_the_concat_runs_in_place_over_its_whole_buffer():
    model = _model(relu_after=True)
    x = np.random.default_rng(2).standard_normal(SHAPE).astype(np.float32)
    got, plan = _run(model, x)
    (concat,) = [st for st in plan.steps if st.node.op_type == "Concat"]
    (relu,) = [st for st in plan.steps if st.node.op_type == "Relu"]
    assert len(plan.memory.strides) == 3
    assert plan.memory.inplace[relu.node.outputs[0]] == concat.node.outputs[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)
