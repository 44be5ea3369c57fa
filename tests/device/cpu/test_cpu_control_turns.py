"""Loop and Scan bodies whose outputs stay in the body's own buffers (plan.Iteration: two buffer sets taken in turn,
an input passed through into the next iteration copied). Against onnxruntime on both plan paths: carried states
that swap places (a state computed in one set, passed through by the next iteration, then read by the one after,
which writes the first set again), a body output that is a view of a computed tensor, an Identity of an outer-scope
tensor, zero iterations, a condition-only loop keeping its scan rows, the states read again after the loop; and
what the buffer sets guarantee, checked on a plan directly."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from tests.conftest import make_model, vinfo
from tests.device.cpu.test_cpu_control_flow import runners
from tests.device.cpu.test_cpu_control_iterations import check, path  # noqa: F401 - path: the fixture

_F = [2, 3]


def swapping_loop(has_m: bool):
    """a_out = b_in (passed through), b_out = (a_in + b_in) * 0.5 computed in the body's buffers and given through
    an Identity, r_out = b_out reshaped (a view); scan outputs a, the view and x (outer) by Identity; with no trip
    count the condition is i + 1 < 6. After the loop an, bn and the loop inputs are read again."""
    nodes = [helper.make_node("Identity", ["b_in"], ["a_out"]),
             helper.make_node("Add", ["a_in", "b_in"], ["ab"]),
             helper.make_node("Mul", ["ab", "half"], ["mean"]),
             helper.make_node("Identity", ["mean"], ["b_out"]),
             helper.make_node("Reshape", ["mean", "flat"], ["r_out"]),
             helper.make_node("Identity", ["b_in"], ["y_a"]),
             helper.make_node("Identity", ["x"], ["y_x"])]
    if has_m:
        nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    else:
        nodes += [helper.make_node("Add", ["i", "one_i"], ["next"]),
                  helper.make_node("Less", ["next", "limit"], ["cond_out"])]
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "half"),
             numpy_helper.from_array(np.array([6], np.int64), "flat"),
             numpy_helper.from_array(np.array(1, np.int64), "one_i"),
             numpy_helper.from_array(np.array(6, np.int64), "limit")]
    body = helper.make_graph(
        nodes, "body", [vinfo("i", [], TensorProto.INT64), vinfo("cond_in", [], TensorProto.BOOL),
                        vinfo("a_in", _F), vinfo("b_in", _F)],
        [vinfo("cond_out", [], TensorProto.BOOL), vinfo("a_out", _F), vinfo("b_out", _F), vinfo("r_out", [6]),
         vinfo("y_a", _F), vinfo("y_x", _F)], inits)
    loop = helper.make_node("Loop", ["m" if has_m else "", "" if has_m else "c", "a0", "b0"],
                            ["an", "bn", "rs", "ys_a", "ys_x"], body=body)
    nodes = [loop, helper.make_node("Sub", ["an", "a0"], ["after_a"]),
             helper.make_node("Add", ["bn", "b0"], ["after_b"])]
    inputs = [vinfo("m", [], TensorProto.INT64) if has_m else vinfo("c", [], TensorProto.BOOL)]
    inputs += [vinfo(n, _F) for n in ("a0", "b0", "x")]
    outputs = [vinfo("an", _F), vinfo("bn", _F), vinfo("rs", [None, 6]), vinfo("ys_a", [None, *_F]),
               vinfo("ys_x", [None, *_F]), vinfo("after_a", _F), vinfo("after_b", _F)]
    return make_model(nodes, inputs, outputs)


def swap_feeds(trips: int | None, cond: bool = True) -> dict:
    rng = np.random.default_rng(trips or 0)
    feeds = {"m": np.array(trips, np.int64)} if trips is not None else {"c": np.array(cond)}
    return feeds | {n: rng.standard_normal(_F).astype(np.float32) for n in ("a0", "b0", "x")}


@pytest.mark.parametrize("trips", [0, 1, 2, 3, 8])
@pytest.mark.usefixtures("path")
def test_states_swapping_places_across_the_two_buffer_sets_match_onnxruntime(trips):
    feeds = swap_feeds(trips)
    kept = {n: v.copy() for n, v in feeds.items()}
    got = check(swapping_loop(True), feeds)
    assert got[2].shape == (trips, 6)
    for name, value in feeds.items():
        np.testing.assert_array_equal(value, kept[name])      # no input written
        assert not any(np.shares_memory(g, value) for g in got), name
    assert not any(np.shares_memory(g, h) for k, g in enumerate(got) for h in got[k + 1:])


@pytest.mark.parametrize("cond", [True, False])
@pytest.mark.usefixtures("path")
def test_a_condition_only_loop_keeps_its_own_scan_rows(cond):
    got = check(swapping_loop(False), swap_feeds(None, cond))
    rows = 6 if cond else 0
    assert got[2].shape == (rows, 6) and got[3].shape == (rows, *_F)


def test_an_iteration_copies_only_an_output_in_the_other_buffer_set():
    """On the body plan itself: an output computed this iteration stays in this turn's arena (no copy); an input
    passed through from the previous turn's arena is copied before the next iteration writes that arena."""
    with nnhal.Session(swapping_loop(True), devices=["cpu"]) as s:
        s.run(swap_feeds(2))
        (runner,) = runners(s)
        (plan,) = runner.cache.values()
    iteration = plan.iterate()
    try:
        first, second = (buffers.arena for buffers in iteration.sets)
        a, b = np.ones(_F, np.float32), np.full(_F, 3.0, np.float32)
        outs = iteration.call([np.array(0, np.int64), np.array(True), a, b, np.zeros(_F, np.float32)])
        _, a1, b1, r1, _, _ = outs
        assert a1 is b                                       # passed through: not in either arena
        assert np.shares_memory(b1, first) and np.shares_memory(r1, first)
        np.testing.assert_array_equal(b1, np.full(_F, 2.0, np.float32))
        outs = iteration.call([np.array(1, np.int64), np.array(True), a1, b1, np.zeros(_F, np.float32)])
        _, a2, b2, _, y2, _ = outs
        assert not np.shares_memory(a2, first) and not np.shares_memory(y2, first)   # copied out of the first set
        np.testing.assert_array_equal(a2, np.full(_F, 2.0, np.float32))
        assert np.shares_memory(b2, second)
        np.testing.assert_array_equal(b2, np.full(_F, 2.5, np.float32))
    finally:
        iteration.close()


def gather_loop():
    """frame = frames[i] (a row view per iteration), s += relu(frame); the trip count may pass the rows."""
    body = helper.make_graph(
        [helper.make_node("Gather", ["frames", "i"], ["frame"], axis=0, name="frame_of_i"),
         helper.make_node("Relu", ["frame"], ["r"]),
         helper.make_node("Add", ["s_in", "r"], ["s_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [vinfo("i", [], TensorProto.INT64), vinfo("cond_in", [], TensorProto.BOOL), vinfo("s_in", [3])],
        [vinfo("cond_out", [], TensorProto.BOOL), vinfo("s_out", [3])])
    return make_model([helper.make_node("Loop", ["m", "", "s0"], ["sn"], body=body)],
                      [vinfo("m", [], TensorProto.INT64), vinfo("s0", [3]), vinfo("frames", [4, 3])],
                      [vinfo("sn", [3])])


def test_a_body_runs_by_its_positional_entry_and_a_failing_kernel_in_it_is_named():
    frames = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
    feeds = {"m": np.array(4, np.int64), "s0": np.zeros(3, np.float32), "frames": frames}
    with nnhal.Session(gather_loop(), devices=["cpu"]) as s:
        got = s.run(feeds)[0]
        (runner,) = runners(s)
        (plan,) = runner.cache.values()
        assert len(plan.chunks) == 1 and plan.chunks[0].call is not None
        np.testing.assert_array_equal(got, np.maximum(frames, 0).sum(axis=0))
        with pytest.raises(nnhal.NnhalError, match="frame_of_i"):
            s.run(feeds | {"m": np.array(6, np.int64)})        # frames[4] is out of range


def if_model():
    """Each branch gives a tensor it computes (through an Identity and as a reshaped view), an outer tensor through
    an Identity and a constant; the If's outputs are the graph's."""
    def branch(tag: str, op: str):
        const = numpy_helper.from_array(np.full(_F, 7.0 if tag == "then" else -7.0, np.float32), f"{tag}_k")
        return helper.make_graph(
            [helper.make_node(op, ["x", "x"], [f"{tag}_v"]),
             helper.make_node("Identity", [f"{tag}_v"], [f"{tag}_a"]),
             helper.make_node("Reshape", [f"{tag}_v", "flat"], [f"{tag}_r"]),
             helper.make_node("Identity", ["x"], [f"{tag}_x"]),
             helper.make_node("Identity", [f"{tag}_k"], [f"{tag}_c"])],
            tag, [], [vinfo(f"{tag}_a", _F), vinfo(f"{tag}_r", [6]), vinfo(f"{tag}_x", _F), vinfo(f"{tag}_c", _F)],
            [const])
    node = helper.make_node("If", ["c"], ["a", "r", "xo", "k"], then_branch=branch("then", "Add"),
                            else_branch=branch("else", "Mul"))
    return make_model([node], [vinfo("c", [], TensorProto.BOOL), vinfo("x", _F)],
                      [vinfo("a", _F), vinfo("r", [6]), vinfo("xo", _F), vinfo("k", _F)],
                      [numpy_helper.from_array(np.array([6], np.int64), "flat")])


@pytest.mark.usefixtures("path")
def test_an_if_copies_its_branch_outputs_once_into_its_own():
    x = np.random.default_rng(3).standard_normal(_F).astype(np.float32)
    with nnhal.Session(if_model(), devices=["cpu"]) as s:
        first = s.run({"c": np.array(True), "x": x})
        kept = [a.copy() for a in first]
        second = s.run({"c": np.array(True), "x": x * 2})
        other = s.run({"c": np.array(False), "x": x})
    for got, want in zip(first, kept):
        np.testing.assert_array_equal(got, want)        # a later run wrote none of the arrays a run returned
    np.testing.assert_array_equal(first[0], x + x)
    np.testing.assert_array_equal(first[1], (x + x).reshape(6))
    np.testing.assert_array_equal(second[0], 4 * x)
    np.testing.assert_array_equal(other[0], x * x)
    np.testing.assert_array_equal(other[3], np.full(_F, -7.0, np.float32))
    for run in (first, second, other):
        assert not any(np.shares_memory(g, x) for g in run)
        assert not any(np.shares_memory(g, h) for k, g in enumerate(run) for h in run[k + 1:])
    assert not any(np.shares_memory(g, h) for g in first for h in second)
