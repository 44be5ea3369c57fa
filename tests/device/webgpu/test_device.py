"""The webgpu device record: unavailable without wgpu or an adapter (and nothing else breaks), honest
evaluation against the adapter's binding limit, a forced fallback in the middle of a model with its
boundary copies in the placement report, the async path, and buffers reused by lifetime."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.device import Candidate, Device
from nnhal.device.manager import register_device, unregister_device
from nnhal.device.webgpu.gpu import Gpu
from nnhal.device.webgpu.webgpu_device import (
    WEBGPU_ALLOCATOR,
    WEBGPU_INTERFACE,
    WebgpuState,
    webgpu_async_run,
    webgpu_async_wait,
)
from nnhal.zoo import input_for, resolve


def _mlp(width: int = 48) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32) / 7, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32) / 7, "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Tanh", ["h"], ["t"], name="tanh"),
             helper.make_node("Sigmoid", ["t"], ["s"], name="sigmoid"),
             helper.make_node("MatMul", ["s", "w2"], ["y"], name="mm2")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _reference(x: np.ndarray, model) -> np.ndarray:
    w1, w2 = (numpy_helper.to_array(i).astype(np.float64) for i in model.graph.initializer)
    return (1 / (1 + np.exp(-np.tanh(x @ w1)))) @ w2


def test_without_the_wgpu_package_the_device_is_listed_as_unavailable():
    code = ("import sys; sys.modules['wgpu'] = None\n"
            "import numpy as np, nnhal\n"
            "from nnhal.cli.main import main\n"
            "main(['devices'])\n"
            "from nnhal.zoo import resolve\n"
            "d = nnhal.explain(resolve('zoo:squeezenet?weights=random'), devices=['webgpu', 'cpu']).decisions[0]\n"
            "print('PLACED', d.device, d.declined.get('webgpu'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("webgpu"))
    assert "unavailable" in line
    assert "the Python package 'wgpu' is not installed" in out.stdout
    placed = next(ln for ln in out.stdout.splitlines() if ln.startswith("PLACED"))
    # NOTE: placement reads describe() first; an unavailable device lists no ops, so it declines every node
    assert placed == "PLACED cpu does not support op Conv"


def test_without_an_adapter_describe_is_empty_and_evaluation_says_why():
    device = Device("webgpuabsent", WEBGPU_INTERFACE, WEBGPU_ALLOCATOR)
    register_device(device)
    try:
        device.privacy = WebgpuState(gpu=Gpu(unavailable="wgpu found no adapter (test)"))
        desc = device.describe()
        assert not desc.ops and "no adapter" in desc.summary
        node = helper.make_node("Relu", ["x"], ["y"])
        verdict = WEBGPU_ALLOCATOR.evaluation(device, Candidate(node, [None], [None], "fp32"))
        assert not verdict.ok and "no adapter" in verdict.reason
    finally:
        unregister_device("webgpuabsent")


def test_a_node_over_the_binding_limit_is_declined_with_the_limit(webgpu):
    limit = webgpu.privacy.gpu.max_binding
    width = limit // 4 + 1
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="big"),
                               helper.make_node("Relu", ["s"], ["t"], name="small")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width]),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    report = nnhal.explain(model, devices=["webgpu", "cpu"])
    by_node = {d.node: d for d in report.decisions}
    assert by_node["big"].device == "cpu"
    assert "max_storage_buffer_binding_size" in by_node["big"].declined["webgpu"]
    assert by_node["small"].device == "webgpu"


def test_a_refused_op_in_the_middle_falls_back_and_the_report_shows_the_copies(webgpu):
    model = _mlp()
    x = np.random.default_rng(1).standard_normal((5, 48)).astype(np.float32)
    with nnhal.Session(model, devices=["webgpu", "cpu"], deny={"tanh": ["webgpu"]}, strict=True) as s:
        y = s.run({"x": x})[0]
        placed = {n: d.device for n, d in s.placement.items()}
    assert placed == {"mm1": "webgpu", "tanh": "cpu", "sigmoid": "webgpu", "mm2": "webgpu"}
    np.testing.assert_allclose(y, _reference(x, model), rtol=1e-4, atol=1e-5)
    report = nnhal.explain(model, devices=["webgpu", "cpu"], deny={"tanh": ["webgpu"]})
    crossing = {b.tensor: b for b in report.boundaries if b.producer != "graph input" and b.consumer != "graph output"}
    assert set(crossing) == {"h", "t"}
    assert all(b.nbytes == 5 * 48 * 4 for b in crossing.values())
    text = str(report)
    assert "3 subgraph(s)" in text and f"{2 * 5 * 48 * 4:,} bytes cross between subgraphs" in text


def test_async_run_then_wait_gives_the_outputs(webgpu):
    model = _mlp()
    x = np.random.default_rng(2).standard_normal((5, 48)).astype(np.float32)
    g = nnhal.create_graph(nnhal.create_context("async", ["webgpu"]), "onnx", model)
    nnhal.set_graph_input(g, "x", x)
    nnhal.prerun_graph(g, nnhal.Options())
    try:
        sg = g.execution.subgraphs[0]
        assert sg.device == "webgpu" and sg.stats["webgpu_dispatches"] == 2    # MatMul+Tanh+Sigmoid fused, MatMul
        sg.values = {"x": x}
        webgpu_async_run(webgpu, sg)
        while not webgpu_async_wait(webgpu, sg, True):
            pass
        np.testing.assert_allclose(sg.values["y"], _reference(x, model), rtol=1e-4, atol=1e-5)
        nnhal.run_graph(g, block=False)
        nnhal.wait_graph(g)
        np.testing.assert_allclose(nnhal.get_graph_output(g, 0), _reference(x, model), rtol=1e-4, atol=1e-5)
    finally:
        nnhal.postrun_graph(g)
        nnhal.destroy_graph(g)


def test_intermediate_buffers_are_reused_by_lifetime(webgpu):
    model = resolve("zoo:squeezenet?weights=random&seed=1")
    g = nnhal.create_graph(nnhal.create_context("plan", ["webgpu", "cpu"]), "onnx", model)
    for name, value in input_for(model, seed=0).items():
        nnhal.set_graph_input(g, name, value)
    nnhal.prerun_graph(g, nnhal.Options())
    try:
        (sg,) = g.execution.subgraphs
        plan = sg.device_graph.plan
        # 26 Conv+Relu pairs fuse (one launch each); intermediates share a handful of slots
        assert sg.stats["webgpu_dispatches"] < len(sg.nodes)
        assert 0 < plan.intermediate_bytes < plan.unplanned_bytes / 3      # 5.5 MB instead of 17.5 MB
        scratch = [s for s, kind in plan.kinds.items() if kind == "scratch"]
        assert len(scratch) < len({n for n, s in plan.slot.items() if plan.kinds[s] == "scratch"})
    finally:
        nnhal.postrun_graph(g)
        nnhal.destroy_graph(g)


def test_a_webgpu_branch_runs_async_beside_a_cpu_branch(webgpu):
    """Two independent branches, one per device: the scheduler starts webgpu with async_run and runs the
    CPU branch while the GPU works; both results are right."""
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((32, 32)).astype(np.float32) / 6
    w2 = rng.standard_normal((32, 32)).astype(np.float32) / 6
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"], name="gpu_mm"),
             helper.make_node("Relu", ["a"], ["ra"], name="gpu_relu"),
             helper.make_node("MatMul", ["x", "w2"], ["b"], name="cpu_mm"),
             helper.make_node("Sigmoid", ["b"], ["sb"], name="cpu_sigmoid")]
    graph = helper.make_graph(nodes, "branches", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
                              [helper.make_tensor_value_info("ra", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("sb", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((4, 32)).astype(np.float32)
    before = webgpu.privacy.async_runs
    with nnhal.Session(model, devices=["webgpu", "cpu"], deny={"cpu_mm": ["webgpu"], "cpu_sigmoid": ["webgpu"]},
                       strict=True) as s:
        ra, sb = s.run({"x": x})
        devices = [sg.device for sg in s.graph.execution.subgraphs]
    assert devices == ["webgpu", "cpu"]
    np.testing.assert_allclose(ra, np.maximum(x.astype(np.float64) @ w1, 0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(sb, 1 / (1 + np.exp(-(x.astype(np.float64) @ w2))), rtol=1e-4, atol=1e-5)
    assert webgpu.privacy.async_runs == before + 1


def test_profile_times_every_dispatch_on_the_gpu(webgpu):
    if not webgpu.privacy.gpu.timestamps:
        pytest.skip("the adapter has no timestamp-query")
    model = _mlp()
    x = np.random.default_rng(4).standard_normal((5, 48)).astype(np.float32)
    with nnhal.Session(model, devices=["webgpu"], strict=True) as s:
        profile = s.profile({"x": x}, runs=2)
        y = s.run({"x": x})[0]        # timing is off again: one pass, same result
    kernels = {(n.op, n.kernel) for n in profile.nodes if n.device == "webgpu"}
    assert kernels == {("MatMul", "MatMul+Tanh+Sigmoid"), ("MatMul", "MatMul")}
    assert all(n.ms > 0 for n in profile.nodes if n.device == "webgpu")
    np.testing.assert_allclose(y, _reference(x, model), rtol=1e-4, atol=1e-5)
