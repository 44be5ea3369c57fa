"""Control-flow bodies on the CPU are prepared once and reused across iterations and runs."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu.kernels.control import plan_iteration_body
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
        # the body was compiled by the cpu device's own plan (a Loop's: inputs passed through as they are),
        # passed to the Loop kernel (no global hook)
        assert runner.compiler is plan_iteration_body
        assert all(isinstance(plan, Plan) for plan in runner.cache.values())


def test_shape_patterns_keep_only_the_dims_that_agree():
    from nnhal.hostkernels._qrc import _matches, _merge

    pattern = _merge([((1, 4), ())], ((2, 4), ()))
    assert pattern == ((None, 4), ())
    assert _matches(pattern, ((7, 4), ())) and not _matches(pattern, ((7, 5), ()))
    assert _merge([pattern], ((7, 5), ())) == ((None, None), ())


def _if_model(size: int):
    """The whole model inside an If: a 1x1 Conv of an outer input with ``size`` output elements per branch."""
    w = numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "w")
    branches = [helper.make_graph([helper.make_node("Conv", ["x", "w"], [f"{b}_y"])], b, [],
                                  [vinfo(f"{b}_y", [1, 1, 1, size])], [w]) for b in ("then", "else")]
    return make_model([helper.make_node("If", ["c"], ["y"], then_branch=branches[0], else_branch=branches[1])],
                      [vinfo("c", [], TensorProto.BOOL), vinfo("x", [1, 1, 1, size])], [vinfo("y", [1, 1, 1, size])])


def test_a_plan_that_iterates_a_body_runs_on_the_pools(monkeypatch):
    """A Loop's body products are one step's: BLAS's threads would wake for each of them (cpu_pre_run)."""
    monkeypatch.delenv("NNHAL_CPU_POOL", raising=False)
    with nnhal.Session(loop_model(grow=False, trips=5), devices=["cpu"], num_thread=2) as s:
        s.run({"x": np.zeros((1, 4), np.float32)})
        assert s.subgraphs[0].stats["thread_pool"]


def test_an_if_chooses_its_threads_by_its_branches_products(monkeypatch):
    from nnhal.device.cpu import parallel

    monkeypatch.delenv("NNHAL_CPU_POOL", raising=False)
    monkeypatch.setattr(parallel, "avx512", lambda: False)
    for size, pools in ((16, False), (parallel.POOL_MIN_MEDIAN_OUTPUT_NO_AVX512 * 4, True)):
        with nnhal.Session(_if_model(size), devices=["cpu"], num_thread=2) as s:
            y = s.run({"c": np.array(True), "x": np.arange(size, dtype=np.float32).reshape(1, 1, 1, size)})[0]
            assert s.subgraphs[0].stats["thread_pool"] is pools, size
        np.testing.assert_array_equal(y.reshape(-1), np.arange(size, dtype=np.float32))


def test_the_switches_are_read_when_the_session_is_prepared(monkeypatch):
    """NNHAL_CPU_POOL and NNHAL_CHECK are read once per plan at prerun (a Session's first run; the Loop node's at
    its prepare), never per run: later runs keep what they said then."""
    from nnhal.device.cpu import parallel
    from nnhal.device.cpu import plan as cpu_plan

    verified = []
    real = cpu_plan._verify
    monkeypatch.setattr(cpu_plan, "_verify", lambda step, result: (verified.append(step.node.op_type),
                                                                   real(step, result)))
    x = np.zeros((1, 4), np.float32)
    want = np.full((1, 4), 6.0, np.float32)
    monkeypatch.setenv("NNHAL_CPU_POOL", "0")
    monkeypatch.delenv("NNHAL_CHECK", raising=False)
    with nnhal.Session(loop_model(grow=False, trips=3), devices=["cpu"], num_thread=2) as s:
        np.testing.assert_array_equal(s.run({"x": x})[0], want)       # the prerun
        monkeypatch.setenv("NNHAL_CPU_POOL", "1")
        monkeypatch.setenv("NNHAL_CHECK", "1")
        np.testing.assert_array_equal(s.run({"x": x})[0], want)
        assert not s.subgraphs[0].stats["thread_pool"] and not parallel.enabled()
        assert verified == []                           # prepared unchecked: no step verified
    monkeypatch.delenv("NNHAL_CPU_POOL")
    with nnhal.Session(loop_model(grow=False, trips=3), devices=["cpu"], num_thread=2) as s:
        np.testing.assert_array_equal(s.run({"x": x})[0], want)
        assert s.subgraphs[0].stats["thread_pool"] and parallel.enabled()
        # prepared checked: the Loop step and its body's Add verified in every iteration
        assert verified.count("Loop") == 1 and verified.count("Add") == 3
        monkeypatch.delenv("NNHAL_CHECK")
        np.testing.assert_array_equal(s.run({"x": x})[0], want)
        assert verified.count("Loop") == 2 and verified.count("Add") == 6
    parallel.use_pool(True)


def test_identities_are_aliases_in_bodies_and_profiles():
    """An Identity runs as an alias on the cpu device (kernel "alias": bound, never called, on the generated
    path), in a Loop body too, and a profile of the Loop names no reference kernel."""
    with nnhal.Session(loop_model(grow=False, trips=4), devices=["cpu"], num_thread=1) as s:
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        np.testing.assert_array_equal(s.run({"x": x})[0], x + 8)
        prof = s.profile({"x": x}, runs=2, warmup=0)
    kernels = {(n.op, n.kernel) for n in prof.nodes}
    assert ("Identity", "alias") in kernels and not any(k == "reference" for _, k in kernels), kernels
