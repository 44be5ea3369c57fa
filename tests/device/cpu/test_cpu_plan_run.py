"""Plan.run (device/cpu/plan.py): the run path of every Session.run takes the generated chunks straight over the
slot list; checked and profiled runs the interpreting loop (Plan.execute). Both against onnxruntime."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu.plan import Plan
from tests.conftest import make_model, vinfo


def chain_model():
    """A graph output that other steps read too (``a``), a view (Reshape), a multi-output step and a Gather whose
    indices a run may put out of range."""
    c = numpy_helper.from_array(np.linspace(-1, 1, 6, dtype=np.float32).reshape(1, 6), "c")
    shape = numpy_helper.from_array(np.array([3, 4], np.int64), "shape")
    nodes = [helper.make_node("Add", ["x", "c"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["v"], name="view"),
             helper.make_node("Split", ["v"], ["p", "q"], axis=1, name="split"),
             helper.make_node("Mul", ["p", "q"], ["m"], name="mul"),
             helper.make_node("Gather", ["m", "i"], ["y"], axis=0, name="the_gather")]
    return make_model(nodes, [vinfo("x", [2, 6]), vinfo("i", [2], TensorProto.INT64)],
                      [vinfo("y", [2, 2]), vinfo("a", [2, 6])], [c, shape])


def feeds(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((2, 6)).astype(np.float32), "i": np.array([2, 0], np.int64)}


def plans(session) -> list[Plan]:
    return [sg.device_graph for sg in session.graph.execution.subgraphs if sg.device == "cpu"]


def test_the_run_path_takes_the_chunks_and_matches_onnxruntime(monkeypatch):
    model = chain_model()
    oracle = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with nnhal.Session(model, devices=["cpu"]) as s:
        s.run(feeds(0))
        assert plans(s) and all(p.chunks for p in plans(s))

        def interpreted(*args, **kwargs):
            raise AssertionError("the run path went through Plan.execute")

        monkeypatch.setattr(Plan, "execute", interpreted)
        for seed in range(3):
            got, want = s.run(feeds(seed)), oracle.run(None, feeds(seed))
            for g, w in zip(got, want):
                # a few float32 roundings (one add, one multiply) per element
                np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
        first, second = s.run(feeds(1)), s.run(feeds(1))
        assert all(a is not b for a, b in zip(first, second))     # outputs are the caller's, fresh per run


def test_checked_runs_still_interpret_and_agree(monkeypatch):
    model = chain_model()
    with nnhal.Session(model, devices=["cpu"]) as s:
        fast = s.run(feeds(4))
    calls = []
    original = Plan.execute

    def counted(self, *args, **kwargs):
        calls.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Plan, "execute", counted)
    monkeypatch.setenv("NNHAL_CHECK", "1")           # read at prerun: the plan checks every step's output
    with nnhal.Session(model, devices=["cpu"]) as s:
        checked = s.run(feeds(4))
    assert calls                                     # the checked run went through the interpreting loop
    for f, c in zip(fast, checked):
        np.testing.assert_array_equal(f, c)          # the same kernels in the same order: the same bits


def test_a_failing_run_names_the_node_and_returns_its_buffers():
    with nnhal.Session(chain_model(), devices=["cpu"]) as s:
        s.run(feeds(0))
        pools = [len(p.pool) for p in plans(s)]
        bad = dict(feeds(0), i=np.array([0, 7], np.int64))      # row 7 of a 3-row tensor
        with pytest.raises(nnhal.NnhalError, match="the_gather"):
            s.run(bad)
        assert [len(p.pool) for p in plans(s)] == pools          # the run's buffer set went back to the pool
        np.testing.assert_array_equal(s.run(feeds(0))[1], feeds(0)["x"] + np.linspace(-1, 1, 6, dtype=np.float32))
