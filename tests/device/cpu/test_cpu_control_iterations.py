"""Loop and Scan iterations on the CPU device against onnxruntime, on both plan paths (NNHAL_CHECK=1: the
interpreting loop that verifies every output; 0: the generated straight-line code): zero trips, a condition false
at the first iteration or turning false midway, outer-scope tensors read by a body, nested control flow, scan
outputs written in place along any axis in either direction, and one session run from several threads at once."""
from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from tests.conftest import make_model, vinfo

# Every body here adds and multiplies a few float32 values per element in a fixed order (no reductions):
# nnhal and onnxruntime round the same operations, the tolerance only absorbs a fused multiply-add
RTOL, ATOL = 1e-6, 1e-6


@pytest.fixture(params=["checked", "straight"])
def path(request, monkeypatch):
    monkeypatch.setenv("NNHAL_CHECK", "1" if request.param == "checked" else "0")
    return request.param


def ort_run(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def check(model, feeds, runs: int = 2):
    want = ort_run(model, feeds)
    with nnhal.Session(model, devices=["cpu"]) as s:
        for _ in range(runs):
            got = s.run(feeds)
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert g.shape == w.shape and g.dtype == w.dtype
                np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
    return got


def counting_loop(cond_limit: int | None):
    """s += x * (i + 1) per iteration and a scan output of s, read from the outer-scope tensors ``x`` (a graph
    input) and ``scale`` (made by a node outside the Loop); with ``cond_limit`` the body's condition is
    i + 1 < cond_limit, else it passes its condition through."""
    nodes = [helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["fi", "one"], ["k"]),
             helper.make_node("Mul", ["x", "k"], ["xk"]),
             helper.make_node("Mul", ["xk", "scale"], ["step"]),
             helper.make_node("Add", ["s_in", "step"], ["s_out"]),
             helper.make_node("Identity", ["s_out"], ["y_out"])]
    if cond_limit is None:
        nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    else:
        nodes += [helper.make_node("Add", ["i", "one_i"], ["next"]),
                  helper.make_node("Less", ["next", "limit"], ["cond_out"])]
    inits = [numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(1, np.int64), "one_i"),
             numpy_helper.from_array(np.array(cond_limit or 0, np.int64), "limit")]
    body = helper.make_graph(nodes, "body", [vinfo("i", [], TensorProto.INT64), vinfo("cond_in", [], TensorProto.BOOL),
                                             vinfo("s_in", [2, 3])],
                             [vinfo("cond_out", [], TensorProto.BOOL), vinfo("s_out", [2, 3]), vinfo("y_out", [2, 3])],
                             inits)
    outer = [helper.make_node("Mul", ["x", "x"], ["scale"]),
             helper.make_node("Loop", ["m", "c", "s0"], ["sn", "ys"], body=body, name="loop")]
    return make_model(outer, [vinfo("m", [], TensorProto.INT64), vinfo("c", [], TensorProto.BOOL),
                              vinfo("s0", [2, 3]), vinfo("x", [2, 3])],
                      [vinfo("sn", [2, 3]), vinfo("ys", [None, 2, 3])])


def loop_feeds(trips: int, cond: bool) -> dict:
    rng = np.random.default_rng(trips)
    return {"m": np.array(trips, np.int64), "c": np.array(cond), "s0": rng.standard_normal((2, 3)).astype(np.float32),
            "x": rng.standard_normal((2, 3)).astype(np.float32)}


@pytest.mark.parametrize("trips", [0, 1, 7])
def test_loop_runs_its_trips_and_reads_outer_scope_tensors(trips, path):
    got = check(counting_loop(None), loop_feeds(trips, True))
    assert got[1].shape == (trips, 2, 3)


def test_loop_with_its_condition_false_at_the_first_iteration_runs_no_iteration(path):
    feeds = loop_feeds(5, False)
    got = check(counting_loop(None), feeds)
    np.testing.assert_array_equal(got[0], feeds["s0"])
    assert got[1].shape == (0, 2, 3)


@pytest.mark.parametrize("trips, limit", [(10, 4), (3, 8), (10, 1)])
def test_loop_stops_where_its_condition_turns_false(trips, limit, path):
    got = check(counting_loop(limit), loop_feeds(trips, True))
    assert got[1].shape == (min(trips, limit), 2, 3)


def scan_model(out_axis: int, out_reverse: bool, in_reverse: bool):
    """s += x_t, y_t = s * x_t (a (2, 3) output per step) over 5 steps of axis 0 of xs; y stacked along
    ``out_axis``."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Mul", ["s_out", "x_t"], ["y_t"])],
        "body", [vinfo("s_in", [2, 3]), vinfo("x_t", [2, 3])], [vinfo("s_out", [2, 3]), vinfo("y_t", [2, 3])])
    node = helper.make_node("Scan", ["s0", "xs"], ["sn", "ys"], body=body, num_scan_inputs=1,
                            scan_input_directions=[int(in_reverse)], scan_output_axes=[out_axis],
                            scan_output_directions=[int(out_reverse)])
    y_shape = [2, 3]
    y_shape.insert(out_axis % 3, 5)
    return make_model([node], [vinfo("s0", [2, 3]), vinfo("xs", [5, 2, 3])],
                      [vinfo("sn", [2, 3]), vinfo("ys", y_shape)])


@pytest.mark.parametrize("out_axis", [0, 1, 2, -1])
@pytest.mark.parametrize("out_reverse, in_reverse", [(False, False), (True, False), (False, True), (True, True)])
def test_scan_writes_its_outputs_along_any_axis_in_either_direction(out_axis, out_reverse, in_reverse, path):
    rng = np.random.default_rng(out_axis % 3 + 4 * out_reverse + 8 * in_reverse)
    feeds = {"s0": rng.standard_normal((2, 3)).astype(np.float32),
             "xs": rng.standard_normal((5, 2, 3)).astype(np.float32)}
    check(scan_model(out_axis, out_reverse, in_reverse), feeds)


def nested_model():
    """A Loop whose body runs a Scan over the outer ``xs`` and an If on the counter's parity: odd iterations
    add the Scan's final state, even ones subtract it."""
    scan_body = helper.make_graph(
        [helper.make_node("Add", ["a_in", "x_t"], ["a_out"]), helper.make_node("Identity", ["a_out"], ["z_t"])],
        "scan_body", [vinfo("a_in", [3]), vinfo("x_t", [3])], [vinfo("a_out", [3]), vinfo("z_t", [3])])
    then = helper.make_graph([helper.make_node("Add", ["s_in", "an"], ["t_out"])], "then", [], [vinfo("t_out", [3])])
    other = helper.make_graph([helper.make_node("Sub", ["s_in", "an"], ["e_out"])], "else", [], [vinfo("e_out", [3])])
    inits = [numpy_helper.from_array(np.array(2, np.int64), "two"),
             numpy_helper.from_array(np.array(1, np.int64), "one")]
    body = helper.make_graph(
        [helper.make_node("Scan", ["s_in", "xs"], ["an", "zs"], body=scan_body, num_scan_inputs=1),
         helper.make_node("Mod", ["i", "two"], ["parity"]),
         helper.make_node("Equal", ["parity", "one"], ["odd"]),
         helper.make_node("If", ["odd"], ["s_out"], then_branch=then, else_branch=other),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["zs"], ["zs_out"])],
        "body", [vinfo("i", [], TensorProto.INT64), vinfo("cond_in", [], TensorProto.BOOL), vinfo("s_in", [3])],
        [vinfo("cond_out", [], TensorProto.BOOL), vinfo("s_out", [3]), vinfo("zs_out", [4, 3])], inits)
    loop_inits = [numpy_helper.from_array(np.array(5, np.int64), "m"), numpy_helper.from_array(np.array(True), "c")]
    return make_model([helper.make_node("Loop", ["m", "c", "s0"], ["sn", "zss"], body=body)],
                      [vinfo("s0", [3]), vinfo("xs", [4, 3])], [vinfo("sn", [3]), vinfo("zss", [5, 4, 3])], loop_inits)


def test_nested_control_flow(path):
    rng = np.random.default_rng(11)
    feeds = {"s0": rng.standard_normal(3).astype(np.float32), "xs": rng.standard_normal((4, 3)).astype(np.float32)}
    check(nested_model(), feeds)


def test_one_session_run_from_four_threads_at_once_gives_each_its_own_results():
    """Per-run state (the bodies' arenas, scan outputs, carried state) is never shared by concurrent runs."""
    model = counting_loop(None)
    inputs = [loop_feeds(trips, True) for trips in (3, 9, 17, 33)]
    want = [ort_run(model, feeds) for feeds in inputs]
    failures: list[str] = []
    with nnhal.Session(model, devices=["cpu"]) as s:
        start = threading.Barrier(len(inputs))

        def work(k: int) -> None:
            start.wait()
            for _ in range(20):
                got = s.run(inputs[k])
                for g, w in zip(got, want[k]):
                    if g.shape != w.shape or not np.allclose(g, w, rtol=RTOL, atol=ATOL):
                        failures.append(f"thread {k}: {g.shape} against {w.shape}")
                        return

        threads = [threading.Thread(target=work, args=(k,)) for k in range(len(inputs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not failures, failures
