"""nnhal.hostkernels.graphrun: a whole graph on the host kernels, by the plain interpreter or by the
compiler a device gives in its record (Optimizer.compile_graph: the cpu plan), with the same results."""
from __future__ import annotations

import dataclasses

import numpy as np
from onnx import TensorProto, helper

import nnhal
from nnhal.device.cpu.plan import compile_nodes as cpu_compile
from nnhal.device.manager import find_device, graph_compiler
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


def test_calibration_compiles_through_the_first_devices_compile_graph_hook(monkeypatch):
    """The optimizer's fp32 runs take their compiler from the device record (Optimizer.compile_graph of the
    first registered device that fills it: the cpu plan), no global hook; the interpreter without one."""
    nnhal.init()
    assert graph_compiler() is cpu_compile
    cpu = find_device("cpu")
    calls = []

    def recording(graph, nodes, inputs, outputs):
        calls.append(len(nodes))
        return graphrun.interpret(graph, nodes, inputs, outputs)

    monkeypatch.setattr(cpu, "optimizer", dataclasses.replace(cpu.optimizer, compile_graph=recording))
    x = np.random.default_rng(2).standard_normal((1, 2, 5, 5)).astype(np.float32)
    table = nnhal.calibrate(_model(), [{"x": x}])
    assert calls, "calibration did not call the device's compile_graph"
    lo, hi = table.ranges["y"]
    assert lo >= 0 and hi > 0               # y = relu(...) + 3 * mean(x) >= 3 * mean(x)
    monkeypatch.setattr(cpu, "optimizer", dataclasses.replace(cpu.optimizer, compile_graph=None))
    assert graph_compiler() is graphrun.interpret
