"""A body's small products as one prepared native GEMM (device/cpu/kernels/step_gemm.py): chosen in Scan
bodies, with a bias and a fused activation, against a float64 reference; never in a main graph."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import nnhal
from nnhal.conformance.tolerance import reduction_bound
from nnhal.device.cpu import native
from tests.conftest import make_model, vinfo

pytestmark = pytest.mark.skipif(not native.available(), reason="the step kernels run the native GEMM")
T, K, N = 6, 24, 40


def _scan(step_nodes: list, inits: list):
    """Scan over xs (T, 1, K): y_t from x_t by ``step_nodes`` (ending in ``y_t``); a state passed through."""
    body = helper.make_graph(step_nodes + [helper.make_node("Identity", ["s_in"], ["s_out"])], "body",
                             [vinfo("s_in", [1]), vinfo("x_t", [1, K])], [vinfo("s_out", [1]), vinfo("y_t", [1, N])],
                             inits)
    node = helper.make_node("Scan", ["s0", "xs"], ["sn", "ys"], body=body, num_scan_inputs=1, name="scan")
    return make_model([node], [vinfo("s0", [1]), vinfo("xs", [T, 1, K])], [vinfo("sn", [1]), vinfo("ys", [T, 1, N])])


def _body_kernels(session) -> set[str]:
    """The kernels of the Scan's body plans (its BodyRunner, held by the closure of its run's scan function)."""
    step = next(st for st in session.subgraphs[0].device_graph.steps if st.node.op_type == "Scan")
    scan = dict(zip(step.run.__code__.co_freevars, step.run.__closure__))["scan"].cell_contents
    runner = dict(zip(scan.__code__.co_freevars, scan.__closure__))["runner"].cell_contents
    return {kernel for plan in runner.cache.values() for kernel in plan.kernels.values()}


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _run(model, rng):
    xs = rng.standard_normal((T, 1, K)).astype(np.float32)
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run({"s0": np.zeros(1, np.float32), "xs": xs})[1]
        kernels = _body_kernels(s)
    return xs.astype(np.float64), got, kernels


@pytest.mark.parametrize("activation", [None, "Relu", "Sigmoid"])
def test_matmul_bias_activation_in_a_body_is_one_native_gemm(activation):
    rng = np.random.default_rng(1)
    w, b = rng.standard_normal((K, N)).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x_t", "w"], ["p"]),
             helper.make_node("Add", ["p", "b"], ["y_t" if activation is None else "z"])]
    if activation:
        nodes.append(helper.make_node(activation, ["z"], ["y_t"]))
    xs, got, kernels = _run(_scan(nodes, [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]), rng)
    assert "step-gemm" in kernels
    z = xs @ w.astype(np.float64) + b
    # the sum of K products and the bias (K + 1 terms); Relu and Sigmoid are 1-Lipschitz, Sigmoid rounds twice more
    bound = reduction_bound(np.abs(xs) @ np.abs(w.astype(np.float64)) + np.abs(b), K + 1)
    want = {None: z, "Relu": np.maximum(z, 0), "Sigmoid": _sigmoid(z)}[activation]
    if activation == "Sigmoid":
        bound = bound + 4 * np.finfo(np.float32).eps
    np.testing.assert_array_less(np.abs(got - want), bound + 1e-30)


@pytest.mark.parametrize("trans_b, alpha, beta", [(1, 1.0, 1.0), (0, 0.5, 2.0), (1, 2.0, 0.0)])
def test_gemm_in_a_body_is_one_native_gemm(trans_b, alpha, beta):
    rng = np.random.default_rng(2)
    b = rng.standard_normal((N, K) if trans_b else (K, N)).astype(np.float32)
    c = rng.standard_normal((1, N)).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x_t", "b", "c"], ["y_t"], transB=trans_b, alpha=alpha, beta=beta)]
    xs, got, kernels = _run(_scan(nodes, [numpy_helper.from_array(b, "b"), numpy_helper.from_array(c, "c")]), rng)
    assert "step-gemm" in kernels
    bm = (b.T if trans_b else b).astype(np.float64)
    want = alpha * (xs @ bm) + beta * c
    # alpha folded into B and beta into C: one more rounding of each term
    bound = reduction_bound(abs(alpha) * np.abs(xs) @ np.abs(bm) + abs(beta) * np.abs(c), K + 3)
    np.testing.assert_array_less(np.abs(got - want), bound + 1e-30)


def test_a_main_graph_product_keeps_the_pooled_kernels():
    w = numpy_helper.from_array(np.ones((K, N), np.float32), "w")
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [vinfo("x", [1, K])],
                       [vinfo("y", [1, N])], [w])
    with nnhal.Session(model, devices=["cpu"]) as s:
        s.run({"x": np.ones((1, K), np.float32)})
        assert s.subgraphs[0].stats["kernels"]["mm"] != "step-gemm"


def test_a_large_product_in_a_body_keeps_the_pooled_kernels():
    big = 512
    body = helper.make_graph([helper.make_node("MatMul", ["x_t", "w"], ["y_t"]),
                              helper.make_node("Identity", ["s_in"], ["s_out"])], "body",
                             [vinfo("s_in", [1]), vinfo("x_t", [1, big])],
                             [vinfo("s_out", [1]), vinfo("y_t", [1, big])],
                             [numpy_helper.from_array(np.ones((big, big), np.float32), "w")])
    model = make_model([helper.make_node("Scan", ["s0", "xs"], ["sn", "ys"], body=body, num_scan_inputs=1)],
                       [vinfo("s0", [1]), vinfo("xs", [2, 1, big])], [vinfo("sn", [1]), vinfo("ys", [2, 1, big])])
    with nnhal.Session(model, devices=["cpu"]) as s:
        ys = s.run({"s0": np.zeros(1, np.float32), "xs": np.ones((2, 1, big), np.float32)})[1]
        assert "step-gemm" not in _body_kernels(s)
    np.testing.assert_array_equal(ys, np.full((2, 1, big), big, np.float32))


def _body_plans(session) -> list:
    step = next(st for st in session.subgraphs[0].device_graph.steps if st.node.op_type == "Scan")
    scan = dict(zip(step.run.__code__.co_freevars, step.run.__closure__))["scan"].cell_contents
    runner = dict(zip(scan.__code__.co_freevars, scan.__closure__))["runner"].cell_contents
    return list(runner.cache.values())


def _direct_calls(plan) -> list[int]:
    """The steps whose GEMM the plan's generated code calls itself (straight.py binds it as ``g<step>``)."""
    names = set(plan.chunks[0].call_code.co_varnames)
    return [k for k, st in enumerate(plan.steps) if st.kernel_name == "step-gemm" and f"g{k}" in names]


@pytest.mark.parametrize("rank", [2, 3])
def test_the_generated_body_calls_the_step_gemm_directly(rank, monkeypatch):
    # a (1, K) row and a (1, 1, K) one (reshaped to a matrix in the call): both skip the kernel's run function,
    # and both give what the kernel's own run gives (the same native call: bit-identical)
    rng = np.random.default_rng(3)
    w, b = rng.standard_normal((K, N)).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    lead = [1] * (rank - 1)
    body = helper.make_graph([helper.make_node("MatMul", ["x_t", "w"], ["p"]),
                              helper.make_node("Add", ["p", "b"], ["z"]), helper.make_node("Relu", ["z"], ["y_t"]),
                              helper.make_node("Identity", ["s_in"], ["s_out"])], "body",
                             [vinfo("s_in", [1]), vinfo("x_t", lead + [K])],
                             [vinfo("s_out", [1]), vinfo("y_t", lead + [N])],
                             [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = make_model([helper.make_node("Scan", ["s0", "xs"], ["sn", "ys"], body=body, num_scan_inputs=1)],
                       [vinfo("s0", [1]), vinfo("xs", [T] + lead + [K])],
                       [vinfo("sn", [1]), vinfo("ys", [T] + lead + [N])])
    feeds = {"s0": np.zeros(1, np.float32), "xs": rng.standard_normal([T] + lead + [K]).astype(np.float32)}
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run(feeds)[1]
        plans = _body_plans(s)
        assert [len(_direct_calls(p)) for p in plans] == [1]
    monkeypatch.setattr("nnhal.device.cpu.straight._direct_gemm", lambda step: None)
    with nnhal.Session(model, devices=["cpu"]) as s:
        want = s.run(feeds)[1]
        assert [len(_direct_calls(p)) for p in _body_plans(s)] == [0]
    np.testing.assert_array_equal(got, want)
    xs = feeds["xs"].astype(np.float64)
    bound = reduction_bound(np.abs(xs) @ np.abs(w.astype(np.float64)) + np.abs(b), K + 1)
    np.testing.assert_array_less(np.abs(got - np.maximum(xs @ w.astype(np.float64) + b, 0)), bound + 1e-30)
