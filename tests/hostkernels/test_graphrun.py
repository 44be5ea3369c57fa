"""nnhal.hostkernels.graphrun: a whole graph on the host kernels, by the plain interpreter (no device
registered) or by the compiler a device installs (the cpu plan), with the same results."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

import nnhal
from nnhal.device.cpu.plan import compile_nodes as cpu_compile
from nnhal.hostkernels import graphrun
from nnhal.optimizer.infer import infer_graph
from nnhal.serializer.onnx_import import load_onnx
from tests.conftest import make_model, vinfo


def _model():
    """y = relu(conv(x, w) + b) summed by a Loop of 3 iterations that adds x's mean each time."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, (4, 2, 3, 3), rng.standard_normal(72).astype(np.float32))
    body = helper.make_graph(
        [helper.make_node("ReduceMean", ["x"], ["m"], keepdims=0, name="mean"),
         helper.make_node("Add", ["acc_in", "m"], ["acc_out"], name="acc"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep")],
        "body", [vinfo("i", [], TensorProto.INT64), vinfo("cond_in", [], TensorProto.BOOL), vinfo("acc_in", [])],
        [vinfo("cond_out", [], TensorProto.BOOL), vinfo("acc_out", [])])
    trips = helper.make_tensor("trips", TensorProto.INT64, (), [3])
    cond = helper.make_tensor("cond", TensorProto.BOOL, (), [True])
    zero = helper.make_tensor("zero", TensorProto.FLOAT, (), [0.0])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Loop", ["trips", "cond", "zero"], ["s"], body=body, name="loop"),
             helper.make_node("Add", ["r", "s"], ["y"], name="add")]
    return make_model(nodes, [vinfo("x", [1, 2, 5, 5])], [vinfo("y", [1, 4, 5, 5])], [w, trips, cond, zero])


def test_the_interpreter_and_the_cpu_plan_agree():
    nnhal.init()
    x = np.random.default_rng(1).standard_normal((1, 2, 5, 5)).astype(np.float32)
    graph = load_onnx(_model())
    graph.tensors["x"].shape = x.shape
    infer_graph(graph, fold=False)
    got = {}
    for name, compiler in (("interpreter", graphrun.interpret), ("cpu plan", cpu_compile)):
        runnable = compiler(graph, graph.nodes, ["x"], ["y"])
        values = {"x": x}
        runnable.run(values)
        got[name] = values["y"]
    with nnhal.Session(_model(), devices=["cpu"]) as s:
        want = s.run({"x": x})[0]
    np.testing.assert_allclose(got["interpreter"], want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["cpu plan"], want, rtol=1e-6, atol=1e-6)
    assert (got["interpreter"] >= 3 * x.mean() - 1e-5).all()      # relu(...) + the Loop's 3 * mean(x)


def test_the_cpu_device_installs_its_planner_while_registered():
    nnhal.init()
    assert graphrun._compiler is cpu_compile
    graphrun.install_compiler(None)
    try:
        assert graphrun._compiler is graphrun.interpret
    finally:
        graphrun.install_compiler(cpu_compile)
