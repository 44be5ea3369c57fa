"""Static views (device/cpu/kernels/view.py): Reshape, Flatten, Squeeze and Unsqueeze of static shapes bound as a
reshape of their input on the generated straight-line path, against onnx.reference on both plan paths, with the
aliasing cases where a view sharing a buffer would go wrong."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.device.cpu import straight
from tests.conftest import make_model, vinfo


def _shape(name: str, values) -> object:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _c(rng) -> object:
    return numpy_helper.from_array(rng.standard_normal((2, 3, 4)).astype(np.float32), "c")


def view_output_model(rng):
    """A Reshape of an arena tensor that is a graph output and is also read by an in-place activation."""
    nodes = [helper.make_node("Add", ["x", "c"], ["a"], name="add"),
             helper.make_node("Reshape", ["a", "s"], ["v"], name="reshape"),
             helper.make_node("Relu", ["v"], ["y"], name="relu")]
    return make_model(nodes, [vinfo("x", [2, 3, 4])], [vinfo("v", [6, 4]), vinfo("y", [6, 4])],
                      [_c(rng), _shape("s", [6, 4])])


def input_view_model(rng):
    """Views of a graph input: one feeds an in-place activation, one is a graph output, one is read last."""
    nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=1, name="flatten"),
             helper.make_node("Relu", ["f"], ["r"], name="relu"),
             helper.make_node("Unsqueeze", ["x", "ax"], ["u"], name="unsqueeze"),
             helper.make_node("Reshape", ["x", "s"], ["w"], name="reshape"),
             helper.make_node("Neg", ["r"], ["n"], name="neg"),
             helper.make_node("Reshape", ["n", "s"], ["m"], name="back"),
             helper.make_node("Add", ["m", "w"], ["y"], name="add")]
    return make_model(nodes, [vinfo("x", [2, 3, 4])], [vinfo("y", [2, 3, 4]), vinfo("u", [1, 2, 3, 4])],
                      [_shape("ax", [0]), _shape("s", [2, 3, 4])])


def overwritten_source_model(rng):
    """The view's source is read by an in-place op before the view is read: the op must not take the buffer."""
    nodes = [helper.make_node("Add", ["x", "c"], ["a"], name="add"),
             helper.make_node("Reshape", ["a", "s"], ["v"], name="reshape"),
             helper.make_node("Neg", ["a"], ["g"], name="neg"),
             helper.make_node("Relu", ["g"], ["h"], name="relu"),
             helper.make_node("Reshape", ["h", "s"], ["hv"], name="reshape_h"),
             helper.make_node("Mul", ["v", "hv"], ["p"], name="mul"),
             helper.make_node("Squeeze", ["p", "ax"], ["y"], name="squeeze")]
    return make_model(nodes, [vinfo("x", [2, 3, 4])], [vinfo("y", [2, 12])],
                      [_c(rng), _shape("s", [2, 1, 12]), _shape("ax", [1])])


def chained_inplace_model(rng):
    """A chain of views into an in-place activation whose result is viewed again (every buffer reused)."""
    nodes = [helper.make_node("Add", ["x", "c"], ["a"], name="add"),
             helper.make_node("Unsqueeze", ["a", "ax"], ["u"], name="unsqueeze"),
             helper.make_node("Flatten", ["u"], ["f"], axis=2, name="flatten"),
             helper.make_node("Relu", ["f"], ["r"], name="relu"),
             helper.make_node("Neg", ["r"], ["n"], name="neg"),
             helper.make_node("Reshape", ["n", "s"], ["v"], name="reshape"),
             helper.make_node("Add", ["v", "c"], ["y"], name="add_back")]
    return make_model(nodes, [vinfo("x", [2, 3, 4])], [vinfo("y", [2, 3, 4])],
                      [_c(rng), _shape("ax", [0]), _shape("s", [2, 3, 4])])


def gather_block_model(rng):
    """Blocks of an arena tensor by constant indices (a QKV split, a first token, a range), one into an in-place
    activation: the activation must not be placed at the start of the blocks' source buffer."""
    c = numpy_helper.from_array(rng.standard_normal((3, 2, 4)).astype(np.float32), "c")
    nodes = [helper.make_node("Add", ["x3", "c"], ["a"], name="add"),
             helper.make_node("Gather", ["a", "i1"], ["g1"], axis=0, name="gather_1"),
             helper.make_node("Gather", ["a", "im1"], ["g2"], axis=0, name="gather_last"),
             helper.make_node("Gather", ["a", "r"], ["g3"], axis=0, name="gather_range"),
             helper.make_node("Relu", ["g1"], ["h"], name="relu"),
             helper.make_node("Add", ["h", "g2"], ["s"], name="add_kv"),
             helper.make_node("Unsqueeze", ["s", "i0"], ["u"], name="unsqueeze"),
             helper.make_node("Gather", ["u", "i1"], ["t"], axis=1, name="gather_token"),
             helper.make_node("Neg", ["t"], ["y"], name="neg")]
    return make_model(nodes, [vinfo("x3", [3, 2, 4])], [vinfo("y", [1, 4]), vinfo("g3", [2, 2, 4])],
                      [c, _shape("i1", 1), _shape("im1", -1), _shape("i0", [0]), _shape("r", [1, 2])])


def gather_overlap_model(rng):
    """An in-place activation is the last reader of a block that overlaps the start of its source buffer: the
    planner must not put the activation's output at that start (the step program refused the partial overlap)."""
    c = numpy_helper.from_array(rng.standard_normal((3, 2, 4)).astype(np.float32), "c")
    nodes = [helper.make_node("Add", ["x3", "c"], ["a"], name="add"),
             helper.make_node("Gather", ["a", "r"], ["g"], axis=0, name="gather_range"),
             helper.make_node("Relu", ["g"], ["h"], name="relu"),
             helper.make_node("Neg", ["h"], ["y"], name="neg")]
    return make_model(nodes, [vinfo("x3", [3, 2, 4])], [vinfo("y", [2, 2, 4])], [c, _shape("r", [1, 2])])


MODELS = [view_output_model, input_view_model, overwritten_source_model, chained_inplace_model, gather_block_model,
          gather_overlap_model]
VIEW_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Gather")


def plans(session):
    return [sg.device_graph for sg in session.graph.execution.subgraphs if sg.device == "cpu"]


@pytest.mark.parametrize("chunk", [256, 1])
@pytest.mark.parametrize("build", MODELS, ids=lambda f: f.__name__)
def test_static_views_match_the_reference_on_both_paths(monkeypatch, build, chunk):
    monkeypatch.setattr(straight, "CHUNK", chunk)      # chunk 1: views cross generated functions
    rng = np.random.default_rng(0)
    model = build(rng)
    feed = model.graph.input[0].name
    x = rng.standard_normal([d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)
    kept = x.copy()
    want = ReferenceEvaluator(model).run(None, {feed: x})
    with nnhal.Session(model, devices=["cpu"]) as s:
        first = s.run({feed: x})
        views = [step for p in plans(s) for step in p.steps if step.node.op_type in VIEW_OPS]
        assert views and all(step.kernel_name == "view" for step in views)
        second = s.run({feed: x + 1})
        again = s.run({feed: x})
    monkeypatch.setenv("NNHAL_CHECK", "1")             # the interpreting loop (read at prerun)
    with nnhal.Session(model, devices=["cpu"]) as s:
        checked = s.run({feed: x})
    np.testing.assert_array_equal(x, kept)             # no view of the input was written through
    # element-wise float32 math in one fixed order: the results are exact
    for got in (first, again, checked):
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_array_equal(g, w)
    for a, b in zip(first, second):
        assert not np.shares_memory(a, b)              # graph outputs are fresh arrays per run
        assert not np.shares_memory(a, x)


def test_views_are_bound_without_a_kernel_call():
    model = input_view_model(np.random.default_rng(0))
    with nnhal.Session(model, devices=["cpu"]) as s:
        s.run({"x": np.zeros((2, 3, 4), np.float32)})
        (plan,) = plans(s)
        names = set().union(*(c.code.co_varnames for c in plan.chunks))
        for k, step in enumerate(plan.steps):
            if step.node.op_type in VIEW_OPS:
                assert f"v{k}" in names and f"f{k}" not in names, step.node.name


def test_a_graph_output_viewing_a_graph_input_is_a_copy():
    """Shapes known only at the run (the plan is built for them): the output is still never the caller's array."""
    nodes = [helper.make_node("Shape", ["x"], ["sh"], name="shape"),
             helper.make_node("Reshape", ["x", "sh"], ["y"], name="reshape")]
    model = make_model(nodes, [vinfo("x", [None, 4])], [vinfo("y", [None, 4])])
    with nnhal.Session(model, devices=["cpu"]) as s:
        for rows in (3, 5):
            x = np.arange(4 * rows, dtype=np.float32).reshape(rows, 4)
            y = s.run({"x": x})[0]
            np.testing.assert_array_equal(y, x)
            assert not np.shares_memory(y, x)
