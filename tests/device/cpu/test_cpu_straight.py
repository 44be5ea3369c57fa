"""The CPU plan's generated straight-line run (device/cpu/straight.py) against its interpreting loop."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import straight
from nnhal.device.cpu.straight import Chunk, failing_step
from tests.conftest import make_model, vinfo


def mixed_model():
    """Unary and binary ufunc steps, a multi-output step, a dynamic shape, a constant and an absent input."""
    c = numpy_helper.from_array(np.linspace(-1, 1, 6, dtype=np.float32).reshape(1, 6), "c")
    hi = numpy_helper.from_array(np.array(0.5, np.float32), "hi")
    nodes = [helper.make_node("Add", ["x", "c"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Split", ["r"], ["p", "q"], axis=1, name="split"),
             helper.make_node("Mul", ["p", "q"], ["m"], name="mul"),
             helper.make_node("NonZero", ["m"], ["nz"], name="nonzero"),
             helper.make_node("Clip", ["a", "", "hi"], ["clipped"], name="clip"),
             helper.make_node("Neg", ["m"], ["y"], name="neg")]
    return make_model(nodes, [vinfo("x", [2, 6])], [vinfo("y", [2, 3]), vinfo("nz", [2, None], TensorProto.INT64),
                                                     vinfo("clipped", [2, 6]), vinfo("a", [2, 6])], [c, hi])


def plans(session):
    return [sg.device_graph for sg in session.graph.execution.subgraphs if sg.device == "cpu"]


@pytest.mark.parametrize("chunk", [256, 2, 1])
def test_straight_run_equals_the_interpreting_loop(monkeypatch, chunk):
    monkeypatch.setattr(straight, "CHUNK", chunk)    # small chunks: tensors cross function boundaries
    x = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)
    with nnhal.Session(mixed_model(), devices=["cpu"]) as s:
        fast = s.run({"x": x})
        assert plans(s) and all(p.chunks and len(p.chunks) == -(-len(p.steps) // chunk) for p in plans(s))
        fast_again = s.run({"x": x})
    monkeypatch.setenv("NNHAL_CHECK", "1")       # checking runs take the interpreting loop (read at prerun)
    with nnhal.Session(mixed_model(), devices=["cpu"]) as s:
        slow = s.run({"x": x})
    for f, g, h in zip(fast, fast_again, slow):
        np.testing.assert_array_equal(f, h)
        np.testing.assert_array_equal(g, h)
    assert fast[0] is not fast_again[0]          # graph outputs are fresh arrays per run


@pytest.mark.parametrize("chunk", [256, 1])
def test_a_failing_kernel_is_named(monkeypatch, chunk):
    monkeypatch.setattr(straight, "CHUNK", chunk)
    idx = vinfo("i", [2], TensorProto.INT64)
    model = make_model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                        helper.make_node("Gather", ["r", "i"], ["y"], axis=0, name="the_gather")],
                       [vinfo("x", [3, 2]), idx], [vinfo("y", [2, 2])])
    with nnhal.Session(model, devices=["cpu"]) as s:
        ok = s.run({"x": np.ones((3, 2), np.float32), "i": np.array([0, 2], np.int64)})[0]
        assert ok.shape == (2, 2)
        with pytest.raises(nnhal.NnhalError, match="the_gather"):
            s.run({"x": np.ones((3, 2), np.float32), "i": np.array([0, 7], np.int64)})


def test_failing_step_ignores_foreign_tracebacks():
    def f():
        raise ValueError("x")

    try:
        f()
    except ValueError as exc:
        assert failing_step(exc, [Chunk(f, (lambda: 0).__code__, 0, 5)]) is None
        line = f.__code__.co_firstlineno + 1 - straight.FIRST_STEP_LINE   # f raises on its second line
        assert failing_step(exc, [Chunk(f, f.__code__, 10, line + 1)]) == 10 + line
        assert failing_step(exc, [Chunk(f, f.__code__, 10, line)]) is None   # past the chunk's steps


def test_a_body_plan_is_generated_once_and_runs_over_slots_too(monkeypatch):
    """A control-flow body of one chunk compiles one function, the positional one; its slot-list entry (Plan.run,
    the path of a body run outside Iteration) gives the same outputs as the interpreting loop."""
    import builtins

    from nnhal.device.cpu.kernels.control import plan_iteration_body
    from nnhal.optimizer.infer import infer_graph
    from nnhal.serializer.onnx_import import load_onnx

    compiled = []
    monkeypatch.setattr(straight, "compile", lambda src, *a: (compiled.append(src), builtins.compile(src, *a))[1],
                        raising=False)
    graph = load_onnx(mixed_model().SerializeToString())
    infer_graph(graph)
    plan = plan_iteration_body(graph, graph.nodes, list(graph.inputs), list(graph.outputs))
    assert len(compiled) == 1 and compiled[0].startswith("def run(A,")
    (chunk,) = plan.chunks
    assert chunk.code is chunk.call_code
    x = np.random.default_rng(3).standard_normal((2, 6)).astype(np.float32)
    positional = [np.array(r) for r in plan.call([x])]
    values = {"x": x}
    plan.run(values, check=False)                 # the slot-list entry
    checked = {"x": x}
    plan.run(checked, check=True)                 # the interpreting loop
    for name, got in zip(graph.outputs, positional):
        np.testing.assert_array_equal(got, checked[name])
        np.testing.assert_array_equal(values[name], checked[name])
