"""The direct run of a one-subgraph graph (scheduler/default.py ``_direct``, issue 27): decided at prepare, taken
by every ``Session.run`` it serves, and left for the general path wherever that one must run (two subgraphs, a
device that is not reentrant, a fallback, profiling), with the same outputs, errors and thread safety."""
from __future__ import annotations

import re
import threading

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.device.device import Allocator, Description, Device, Interface
from nnhal.device.manager import register_device, unregister_device
from nnhal.errors import InputError
from nnhal.scheduler import default
from tests.conftest import make_model, vinfo
from tests.scheduler.test_fallback_and_async import EXPECTED, X, _compute, chain_model

RNG = np.random.default_rng(0)
W = (RNG.standard_normal((16, 16)) * 0.3).astype(np.float32)


def mlp_model():
    """x (4, 16) -> MatMul -> Relu -> Add x -> y: one cpu subgraph."""
    w = helper.make_tensor("w", 1, W.shape, W.ravel().tolist())
    return make_model([helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
                       helper.make_node("Relu", ["m"], ["r"], name="relu"),
                       helper.make_node("Add", ["r", "x"], ["y"], name="add")],
                      [vinfo("x", [4, 16])], [vinfo("y", [4, 16])], [w])


def expected(model, feeds):
    return ReferenceEvaluator(model).run(None, feeds)


@pytest.fixture
def general_calls(monkeypatch):
    """How many runs went through the scheduler's general path (default._execute)."""
    calls = {"n": 0}
    original = default._execute

    def counted(ex):
        calls["n"] += 1
        return original(ex)

    monkeypatch.setattr(default, "_execute", counted)
    return calls


def test_a_one_subgraph_cpu_graph_runs_direct_with_the_oracles_outputs(general_calls):
    model = mlp_model()
    with nnhal.Session(model, devices=["cpu"]) as s:
        for k in range(5):
            x = RNG.standard_normal((4, 16)).astype(np.float32)
            got = s.run({"x": x})
            # one float32 MatMul of 16 terms, then exact Relu and Add: a few ulps of the products' sum
            np.testing.assert_allclose(got[0], expected(model, {"x": x})[0], rtol=1e-5, atol=1e-5)
            assert s.run([x])[0].tobytes() == got[0].tobytes()        # positional feeds: the same run
        entry = next(iter(s.graph.entries.values()))
        assert entry.direct is not None
    assert general_calls["n"] == 0


@pytest.mark.parametrize("feeds, error", [
    ({"x": X.astype(np.float64)}, r"input 'x' expects dtype float32, got float64"),
    ({"x": X[:4]}, r"input 'x' expects shape \[8\], got \[4\]"),
    ({}, r"inputs not given: \['x'\]"),
    ({"x": X, "z": X}, "the graph has no input named 'z'"),
    ({"x": X.reshape(2, 4)}, r"input 'x' expects shape \[8\], got \[2, 4\]"),
    ({0: X.astype(np.int64)}, r"input 'x' expects dtype float32, got int64"),
    ([X, X], None),
])
def test_bad_feeds_after_warm_runs_raise_what_a_fresh_session_raises(feeds, error):
    model = chain_model()
    with nnhal.Session(model, devices=["cpu"]) as fresh:
        with pytest.raises(InputError) as first:
            fresh.run(feeds)
    if error is not None:
        assert re.search(error, str(first.value))
    with nnhal.Session(model, devices=["cpu"]) as s:
        for _ in range(3):                                       # the direct run and the exact-feeds check warm
            np.testing.assert_allclose(s.run({"x": X})[0], EXPECTED, rtol=1e-6)
        with pytest.raises(InputError, match=re.escape(str(first.value))):
            s.run(feeds)
        np.testing.assert_allclose(s.run({"x": X})[0], EXPECTED, rtol=1e-6)


def test_the_callers_feeds_are_left_as_they_are():
    with nnhal.Session(chain_model(), devices=["cpu"]) as s:
        feeds = {"x": X}
        s.run(feeds)
        s.run(feeds)
        assert list(feeds) == ["x"] and feeds["x"] is X


def test_two_threads_running_one_session_get_the_single_thread_outputs(general_calls):
    model = mlp_model()
    inputs = [RNG.standard_normal((4, 16)).astype(np.float32) for _ in range(16)]
    with nnhal.Session(model, devices=["cpu"]) as s:
        want = [s.run({"x": x})[0] for x in inputs]
        errors: list[BaseException] = []
        start = threading.Barrier(2)

        def work(k: int) -> None:
            try:
                start.wait()
                for r in range(300):
                    i = (k * 7 + r) % len(inputs)
                    got = s.run({"x": inputs[i]})[0]
                    if got.tobytes() != want[i].tobytes():
                        raise AssertionError(f"thread {k} run {r}: input {i} gave another output")
            except BaseException as exc:  # re-raised below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[0]
    assert general_calls["n"] == 0


def numpy_device(name: str, reentrant: bool = True, fail_from: int | None = None) -> Device:
    """Relu/Add in numpy, reentrant unless told; its run raises from its ``fail_from``-th call on."""
    calls = {"n": 0}

    def run(device, sg):
        calls["n"] += 1
        if fail_from is not None and calls["n"] >= fail_from:
            raise RuntimeError("injected run fault")
        _compute(sg)

    return Device(name, Interface(run=run),
                  Allocator(describe=lambda d: Description(frozenset({"Relu", "Add"}), ("fp32",),
                                                           reentrant=reentrant)))


@pytest.fixture
def device(request):
    made = []

    def make(*args, **kwargs):
        register_device(numpy_device("numpyish", *args, **kwargs))
        made.append("numpyish")

    yield make
    for name in made:
        unregister_device(name)


def test_two_devices_take_the_general_path(device, general_calls):
    device()
    with nnhal.Session(chain_model(), devices=["numpyish", "cpu"]) as s:
        for _ in range(3):
            np.testing.assert_allclose(s.run({"x": X})[0], EXPECTED, rtol=1e-6)
        assert {sg.device for sg in s.subgraphs} == {"numpyish", "cpu"}
        assert next(iter(s.graph.entries.values())).direct is None
    assert general_calls["n"] == 3


@pytest.mark.parametrize("reentrant, direct", [(True, True), (False, False)])
def test_a_device_that_is_not_reentrant_takes_the_general_path(device, reentrant, direct):
    device(reentrant=reentrant)
    model = make_model([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                        helper.make_node("Add", ["a", "x"], ["y"], name="add")], [vinfo("x", [8])], [vinfo("y", [8])])
    with nnhal.Session(model, devices=["numpyish"]) as s:
        np.testing.assert_allclose(s.run({"x": X})[0], np.maximum(X, 0) + X)
        assert (next(iter(s.graph.entries.values())).direct is not None) is direct


def test_a_failing_direct_run_falls_back_then_runs_on_the_general_path(device, general_calls, caplog):
    device(fail_from=3)                           # two good direct runs, then the device fails
    model = make_model([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                        helper.make_node("Add", ["a", "x"], ["y"], name="add")], [vinfo("x", [8])], [vinfo("y", [8])])
    want = np.maximum(X, 0) + X
    with nnhal.Session(model, devices=["numpyish", "cpu"]) as s:
        for _ in range(2):
            np.testing.assert_allclose(s.run({"x": X})[0], want)
        assert general_calls["n"] == 0
        for _ in range(3):                        # the failing run is re-placed on the cpu; the later ones stay there
            np.testing.assert_allclose(s.run({"x": X})[0], want, rtol=1e-6)
        assert [(f.device, f.stage) for f in s.fallbacks] == [("numpyish", "run")]
        assert "injected run fault" in s.fallbacks[0].error
        assert general_calls["n"] == 3


def test_a_failing_direct_run_under_strict_raises_the_general_paths_error(device):
    device(fail_from=2)
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vinfo("x", [8])], [vinfo("y", [8])])
    with nnhal.Session(model, devices=["numpyish"], strict=True) as s:
        np.testing.assert_allclose(s.run({"x": X})[0], np.maximum(X, 0))
        with pytest.raises(nnhal.DeviceError, match=r"subgraph #0 \(1 nodes, first 'relu'\) on device 'numpyish': "
                                                    r"run failed: RuntimeError: injected run fault"):
            s.run({"x": X})


def test_profiling_between_direct_runs(general_calls):
    model = mlp_model()
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    with nnhal.Session(model, devices=["cpu"]) as s:
        want = s.run({"x": x})[0]
        prof = s.profile({"x": x}, runs=3)
        assert prof.nodes and sum(n.ms for n in prof.nodes) > 0
        assert s.graph.execution.timings is None            # profiling switched off again
        np.testing.assert_array_equal(s.run({"x": x})[0], want)
        runs_before = general_calls["n"]
        s.run({"x": x})
        assert general_calls["n"] == runs_before            # back on the direct run


def test_a_control_flow_graph_gives_the_oracles_outputs():
    """An If on the cpu: one subgraph (its branches are the plan's own), so the direct run serves it too."""
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [vinfo("t", [8])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vinfo("e", [8])])
    model = make_model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
                        helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
                        helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="if")],
                       [vinfo("x", [8])], [vinfo("y", [8])],
                       [helper.make_tensor("zero", 1, [], [0.0])])
    with nnhal.Session(model, devices=["cpu"]) as s:
        for x in (X, -X - 1, X + 1):
            np.testing.assert_array_equal(s.run({"x": x})[0], expected(model, {"x": x})[0])


def test_a_graph_input_the_subgraph_does_not_read_is_left_out_of_its_view(general_calls):
    """x feeds the subgraph, unused is a graph input no node reads: the view gets the subgraph's inputs only."""
    seen = []
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vinfo("x", [8]), vinfo("unused", [8])],
                       [vinfo("y", [8])])
    with nnhal.Session(model, devices=["cpu"]) as s:
        sg = s.run({"x": X, "unused": X}) and s.graph.execution.subgraphs[0]
        original = sg.for_run

        def spy(values):
            seen.append(sorted(values))
            return original(values)

        sg.for_run = spy
        entry = next(iter(s.graph.entries.values()))
        entry.direct = default._direct(s.graph.execution, ["y"])
        np.testing.assert_array_equal(s.run({"x": -X, "unused": X})[0], np.maximum(-X, 0))
    assert seen == [sorted(sg.inputs)] and "unused" not in sg.inputs
    assert general_calls["n"] == 0
