"""The per-run entry of the scheduler and the API (scheduler/default.py _enter, scheduler/scheduler.py
Execution.begin, api.py _prepared_for): what a run's subgraph view and execution hold, with and without device
formats, and a prepared graph re-prepared for new input shapes."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import helper

import nnhal
from nnhal.graph.subgraph import Format, Subgraph
from nnhal.optimizer.boundary import to_device
from nnhal.scheduler.default import _enter
from nnhal.scheduler.scheduler import Execution
from tests.conftest import make_model, vinfo


def execution(values: dict, subgraphs: list) -> Execution:
    return Execution(subgraphs=subgraphs, devices={}, options=None).begin(values)


def test_enter_without_formats_hands_the_inputs_as_they_are():
    x, y = np.ones((2, 3), np.float32), np.arange(4, dtype=np.int64)
    sg = Subgraph(0, None, [], ["x", "y"], ["z"], "cpu")
    ex = execution({"x": x, "y": y, "other": x}, [sg])
    view = _enter(ex, sg)
    assert view is not sg and ex.views[0] is view and sg.values == {}    # the shared subgraph keeps no run's values
    assert set(view.values) == {"x", "y"} and view.values["x"] is x and view.values["y"] is y


def test_enter_converts_only_the_inputs_with_a_device_format():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    half = Format(np.dtype(np.float16))
    sg = Subgraph(0, None, [], ["x", "y"], ["z"], "cpu", input_formats={"x": half})
    view = _enter(execution({"x": x, "y": y}, [sg]), sg)
    assert view.values["y"] is y
    assert view.values["x"].dtype == np.float16
    np.testing.assert_array_equal(view.values["x"], to_device(x, half))
    np.testing.assert_array_equal(view.values["x"], x.astype(np.float16))


def test_begin_shares_the_dependencies_and_owns_its_values():
    a = Subgraph(0, None, [], ["x"], ["t"], "cpu")
    b = Subgraph(1, None, [], ["t"], ["z"], "cpu")
    shared = Execution(subgraphs=[a, b], devices={}, options=None)
    one, two = shared.begin({"x": 1}), shared.begin({"x": 2})
    assert shared.dependencies() == {0: set(), 1: {0}} and shared.users() == {0: [1]}
    assert one.dependencies() is shared.dependencies() is two.dependencies()
    assert one.users() is shared.users() is two.users()
    assert one.values == {"x": 1} and two.values == {"x": 2} and one.views is not two.views


def test_new_input_shapes_are_prepared_and_kept():
    model = make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])],
                       [vinfo("x", ["n", 4])], [vinfo("y", ["n", 4])])
    oracle = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    with nnhal.Session(model, devices=["cpu"]) as s:
        for rows in (2, 2, 5, 2):
            x = rng.standard_normal((rows, 4)).astype(np.float32)
            got = s.run({"x": x})[0]
            assert got.shape == (rows, 4)
            np.testing.assert_allclose(got, oracle.run(None, {"x": x})[0], rtol=1e-6, atol=1e-6)
            assert ((rows, 4),) in s.graph.entries      # prepared once, kept (issue 27: tests/api/test_shape_cache.py)
        assert list(s.graph.entries) == [((5, 4),), ((2, 4),)]
