"""Loop and Scan bodies that pass tensors through (an Identity of a body input or of an outer-scope tensor): the
cpu plan of a Loop or Scan body returns such an input as it is instead of copying it per iteration
(kernels/control.py plan_iteration_body). Against onnxruntime on both plan paths: a carried state passed through
and also read after the loop, a body input that is also a scan output, an outer tensor as a carried state and as
a scan output, the counter as a scan output; the node's outputs never share memory with its inputs."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import nnhal
from tests.conftest import make_model, vinfo
from tests.device.cpu.test_cpu_control_flow import runners
from tests.device.cpu.test_cpu_control_iterations import check, path  # noqa: F401 - path: the fixture

_F = [2, 3]


def loop_model(has_cond: bool):
    """t passed through, u += t, v = x (outer) carried; scan outputs t, x, the counter and u; after the loop
    tn + t0 and x * vn read the loop's inputs and outputs again."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["t_in"], ["t_out"]),
         helper.make_node("Add", ["u_in", "t_in"], ["u_out"]),
         helper.make_node("Identity", ["x"], ["v_out"]),
         helper.make_node("Identity", ["t_in"], ["y_t"]),
         helper.make_node("Identity", ["x"], ["y_x"]),
         helper.make_node("Identity", ["i"], ["y_i"]),
         helper.make_node("Identity", ["u_out"], ["y_u"])],
        "body", [vinfo("i", [], TensorProto.INT64), vinfo("cond_in", [], TensorProto.BOOL), vinfo("t_in", _F),
                 vinfo("u_in", _F), vinfo("v_in", _F)],
        [vinfo("cond_out", [], TensorProto.BOOL), vinfo("t_out", _F), vinfo("u_out", _F), vinfo("v_out", _F),
         vinfo("y_t", _F), vinfo("y_x", _F), vinfo("y_i", [], TensorProto.INT64), vinfo("y_u", _F)])
    nodes = [helper.make_node("Loop", ["m", "c" if has_cond else "", "t0", "u0", "v0"],
                              ["tn", "un", "vn", "ts", "xs", "is", "us"], body=body),
             helper.make_node("Add", ["tn", "t0"], ["after_t"]),
             helper.make_node("Mul", ["x", "vn"], ["after_x"])]
    inputs = [vinfo("m", [], TensorProto.INT64)] + ([vinfo("c", [], TensorProto.BOOL)] if has_cond else [])
    inputs += [vinfo(n, _F) for n in ("t0", "u0", "v0", "x")]
    outputs = [vinfo(n, _F) for n in ("tn", "un", "vn")] + [vinfo(n, [None, *_F]) for n in ("ts", "xs")]
    outputs += [vinfo("is", [None], TensorProto.INT64), vinfo("us", [None, *_F]), vinfo("after_t", _F),
                vinfo("after_x", _F)]
    return make_model(nodes, inputs, outputs)


def loop_feeds(trips: int, has_cond: bool) -> dict:
    rng = np.random.default_rng(trips)
    feeds = {"m": np.array(trips, np.int64)} | ({"c": np.array(True)} if has_cond else {})
    return feeds | {n: rng.standard_normal(_F).astype(np.float32) for n in ("t0", "u0", "v0", "x")}


@pytest.mark.parametrize("has_cond", [True, False])
@pytest.mark.parametrize("trips", [0, 1, 5])
@pytest.mark.usefixtures("path")
def test_a_loop_passing_inputs_through_matches_onnxruntime_and_returns_its_own_arrays(trips, has_cond):
    feeds = loop_feeds(trips, has_cond)
    kept = {n: v.copy() for n, v in feeds.items()}
    got = check(loop_model(has_cond), feeds)
    for name, value in feeds.items():
        np.testing.assert_array_equal(value, kept[name])      # no input written
        assert not any(np.shares_memory(g, value) for g in got), name


def test_a_loop_body_copies_no_identity():
    """The straight-line plan of the body: an Identity of a body input, of an outer tensor or of a tensor the body
    computes allocates nothing per iteration (plan.Iteration keeps the outputs valid for the next iteration)."""
    with nnhal.Session(loop_model(True), devices=["cpu"]) as s:
        s.run(loop_feeds(3, True))
        (runner,) = runners(s)
        (plan,) = runner.cache.values()
        fresh = {step.node.outputs[0]: bool(step.fresh) for step in plan.steps if step.node.op_type == "Identity"}
    assert fresh == {"cond_out": False, "t_out": False, "v_out": False, "y_t": False, "y_x": False, "y_i": False,
                     "y_u": False}


def scan_model():
    """h passed through, g += x_t; scan outputs x_t (a slice of the scan input), w (outer) and h."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["h_in"], ["h_out"]),
         helper.make_node("Add", ["g_in", "x_t"], ["g_out"]),
         helper.make_node("Identity", ["x_t"], ["y_x"]),
         helper.make_node("Identity", ["w"], ["y_w"]),
         helper.make_node("Identity", ["h_in"], ["y_h"])],
        "body", [vinfo("h_in", _F), vinfo("g_in", _F), vinfo("x_t", _F)],
        [vinfo("h_out", _F), vinfo("g_out", _F), vinfo("y_x", _F), vinfo("y_w", _F), vinfo("y_h", _F)])
    nodes = [helper.make_node("Scan", ["h0", "g0", "xs"], ["hn", "gn", "ys_x", "ys_w", "ys_h"], body=body,
                              num_scan_inputs=1, scan_input_directions=[1]),
             helper.make_node("Sub", ["hn", "h0"], ["after_h"])]
    return make_model(nodes, [vinfo("h0", _F), vinfo("g0", _F), vinfo("xs", [4, *_F]), vinfo("w", _F)],
                      [vinfo("hn", _F), vinfo("gn", _F)] + [vinfo(n, [4, *_F]) for n in ("ys_x", "ys_w", "ys_h")]
                      + [vinfo("after_h", _F)])


@pytest.mark.usefixtures("path")
def test_a_scan_passing_inputs_through_matches_onnxruntime_and_returns_its_own_arrays():
    rng = np.random.default_rng(5)
    feeds = {n: rng.standard_normal(_F).astype(np.float32) for n in ("h0", "g0", "w")}
    feeds["xs"] = rng.standard_normal((4, *_F)).astype(np.float32)
    kept = {n: v.copy() for n, v in feeds.items()}
    got = check(scan_model(), feeds)
    for name, value in feeds.items():
        np.testing.assert_array_equal(value, kept[name])
        assert not any(np.shares_memory(g, value) for g in got), name
