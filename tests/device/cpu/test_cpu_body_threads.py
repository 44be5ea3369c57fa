"""A prepared Session whose Scan body runs its iterations straight (plan.Iteration's direct call, the body's GEMM
called by the generated code) shared by threads: each run's iterations use their own buffer sets, so concurrent
runs give what each gives alone; a profiled run still times the body's steps."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import helper, numpy_helper

import nnhal
from nnhal.device.cpu import native
from tests.conftest import make_model, vinfo

pytestmark = pytest.mark.skipif(not native.available(), reason="the body's GEMM is the native one")
T, K, H = 16, 12, 20


def _recurrent():
    """h_t = tanh(x_t W + h_{t-1} U + b): a Scan state carried through every iteration, y_t = h_t."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.3, n)
             for n, s in (("w", (K, H)), ("u", (H, H)), ("b", (1, H)))]
    body = helper.make_graph([helper.make_node("Gemm", ["x_t", "w", "b"], ["xw"]),
                              helper.make_node("Gemm", ["h_in", "u"], ["hu"]),
                              helper.make_node("Add", ["xw", "hu"], ["z"]),
                              helper.make_node("Tanh", ["z"], ["h_out"]),
                              helper.make_node("Identity", ["h_out"], ["y_t"])], "body",
                             [vinfo("h_in", [1, H]), vinfo("x_t", [1, K])],
                             [vinfo("h_out", [1, H]), vinfo("y_t", [1, H])], inits)
    node = helper.make_node("Scan", ["h0", "xs"], ["hn", "ys"], body=body, num_scan_inputs=1, name="scan")
    model = make_model([node], [vinfo("h0", [1, H]), vinfo("xs", [T, 1, K])],
                       [vinfo("hn", [1, H]), vinfo("ys", [T, 1, H])])
    return model, [v.copy() for v in (numpy_helper.to_array(i) for i in inits)]


def _oracle(xs, h, w, u, b):
    ys = []
    for x in xs.astype(np.float64):
        h = np.tanh(x @ w + h @ u + b)
        ys.append(h)
    return h, np.stack(ys)


def test_threads_sharing_a_session_get_their_own_iterations():
    model, (w, u, b) = _recurrent()
    rng = np.random.default_rng(6)
    feeds = [{"h0": rng.standard_normal((1, H)).astype(np.float32),
              "xs": rng.standard_normal((T, 1, K)).astype(np.float32)} for _ in range(4)]
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        alone = [s.run(f) for f in feeds]
        for f, (hn, ys) in zip(feeds, alone):
            want_h, want_ys = _oracle(f["xs"], f["h0"].astype(np.float64), w, u, b)
            # T steps of a K + H + 1 term sum through tanh (1-Lipschitz, contracting): 1e-5 bounds it with margin
            np.testing.assert_allclose(ys, want_ys, rtol=0, atol=1e-5)
            np.testing.assert_allclose(hn, want_h, rtol=0, atol=1e-5)
        got: dict[tuple[int, int], list] = {}
        errors: list[BaseException] = []
        barrier = threading.Barrier(4)

        def worker(t: int) -> None:
            try:
                barrier.wait()
                for r in range(25):
                    k = (t + r) % 4
                    got[(t, r)] = (k, s.run(feeds[k]))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors
        for k, result in got.values():
            for a, want in zip(result, alone[k]):
                np.testing.assert_array_equal(a, want)     # the same plan and kernels: the same sums


def test_a_profiled_run_times_the_body_steps_and_gives_the_same_outputs():
    model, _ = _recurrent()
    rng = np.random.default_rng(7)
    feeds = {"h0": np.zeros((1, H), np.float32), "xs": rng.standard_normal((T, 1, K)).astype(np.float32)}
    with nnhal.Session(model, devices=["cpu"]) as s:
        want = s.run(feeds)
        prof = s.profile(feeds, runs=2, warmup=0)
        assert sum(1 for n in prof.nodes if n.op == "Gemm") == 2
        for a, b in zip(s.run(feeds), want):
            np.testing.assert_array_equal(a, b)


def test_a_checked_session_runs_the_body_step_by_step_with_the_same_outputs(monkeypatch):
    # NNHAL_CHECK=1 (read at prepare): the iterations take Plan.call_on's checked loop, not the direct call
    model, _ = _recurrent()
    rng = np.random.default_rng(8)
    feeds = {"h0": np.zeros((1, H), np.float32), "xs": rng.standard_normal((T, 1, K)).astype(np.float32)}
    with nnhal.Session(model, devices=["cpu"]) as s:
        want = s.run(feeds)
    monkeypatch.setenv("NNHAL_CHECK", "1")
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run(feeds)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)     # the same kernels' native calls in the same order
