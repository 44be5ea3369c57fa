"""Control-flow bodies on the CPU are prepared once and reused across iterations and runs."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu.kernels.control import plan_body
from nnhal.device.cpu.plan import Plan
from tests.conftest import make_model, vinfo


def loop_model(grow: bool, trips: int):
    """y = x with ``one`` added (fixed shape) or concatenated (a state growing a row per iteration) ``trips`` times."""
    state = [None, 4] if grow else [1, 4]
    op = helper.make_node("Concat", ["s_in", "one"], ["s_out"], axis=0) if grow else \
        helper.make_node("Add", ["s_in", "one"], ["s_out"])
    body = helper.make_graph(
        [op, helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [vinfo("i", [], TensorProto.INT64), vinfo("cond_in", [], TensorProto.BOOL), vinfo("s_in", state)],
        [vinfo("cond_out", [], TensorProto.BOOL), vinfo("s_out", state)])
    inits = [numpy_helper.from_array(np.full((1, 4), 2.0, np.float32), "one"),
             numpy_helper.from_array(np.array(trips, np.int64), "m"), numpy_helper.from_array(np.array(True), "c")]
    return make_model([helper.make_node("Loop", ["m", "c", "x"], ["y"], body=body, name="loop")],
                      [vinfo("x", [1, 4])], [vinfo("y", [None, 4])], inits)


def runners(session):
    """The BodyRunner of every Loop step of the session's CPU plans."""
    found = []
    for sg in session.graph.execution.subgraphs:
        for step in sg.device_graph.steps:
            if step.node.op_type == "Loop":
                cells = dict(zip(step.run.__code__.co_freevars, step.run.__closure__))
                found.append(cells["runner"].cell_contents)
    return found


def test_a_growing_state_compiles_twice_not_per_iteration():
    model = loop_model(grow=True, trips=30)
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run({"x": x})[0]
        (runner,) = runners(s)
        assert runner.compiles == 2      # the first shapes, then one plan with the growing dim unknown
        again = s.run({"x": x})[0]
        assert runner.compiles == 2      # a second run re-plans nothing
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(again, want)


def test_a_fixed_body_compiles_once_across_runs():
    model = loop_model(grow=False, trips=50)
    with nnhal.Session(model, devices=["cpu"]) as s:
        for k in range(3):
            y = s.run({"x": np.full((1, 4), k, np.float32)})[0]
            np.testing.assert_array_equal(y, np.full((1, 4), k + 100, np.float32))
        (runner,) = runners(s)
        assert runner.compiles == 1
        # the body was compiled by the cpu device's own plan, passed to the Loop kernel (no global hook)
        assert runner.compiler is plan_body
        assert all(isinstance(plan, Plan) for plan in runner.cache.values())


def test_shape_patterns_keep_only_the_dims_that_agree():
    from nnhal.hostkernels._qrc import _matches, _merge

    pattern = _merge([((1, 4), ())], ((2, 4), ()))
    assert pattern == ((None, 4), ())
    assert _matches(pattern, ((7, 4), ())) and not _matches(pattern, ((7, 5), ()))
    assert _merge([pattern], ((7, 5), ())) == ((None, None), ())
