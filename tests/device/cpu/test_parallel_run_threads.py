"""The native pool's threads are the run's (device/cpu/parallel.py): kernels that used to fix their parts at prepare
(Concat, Split, InstanceNormalization: concat.py, split.py, instance_norm.py) take them from the run's num_thread,
so a one-thread run never wakes a worker and a plan prepared while the pool had one thread still splits on two;
their results at 1, 2 and 3 threads are the one-thread bits (each part copies or normalises whole rows in the same
order), also for fewer rows than threads; and a run's end puts the idle workers to sleep (``parallel.rest``).

The wakes are counted by ``native.pool_stats`` with the workers' spin set to 0 (each job a worker takes ends in a
sleep), the rest by a spin of a minute, which only the rest can cut short. No assertion on time: the polls wait
for an event, with a generous cap."""
from __future__ import annotations

import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import native, parallel

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")
pytestmark = pytest.mark.skipif(not native.available(), reason="the native pool is not loaded")

DEFAULT_SPIN_NS = 2_000_000


@pytest.fixture
def pool(monkeypatch):
    """Every kernel splits (parts of any size), the pools forced on for every plan; the spin restored after."""
    monkeypatch.setenv("NNHAL_CPU_POOL", "1")
    monkeypatch.setattr(parallel, "MIN_NATIVE_PART_WORK", 1)
    before = parallel._pool.threads
    yield
    native.pool_set_spin(DEFAULT_SPIN_NS)
    parallel.set_threads(before)


def _model(rows: int):
    """Concat, Split and InstanceNormalization over ``rows`` rows (the units their parts cut), in that order."""
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [rows, 3, 7, 5])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [rows, 3, 4, 5])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("s0", "s1", "n")]
    rng = np.random.default_rng(rows)
    scale = numpy_helper.from_array(rng.uniform(0.5, 1.5, 3).astype(np.float32), "scale")
    bias = numpy_helper.from_array(rng.uniform(-1, 1, 3).astype(np.float32), "bias")
    sizes = numpy_helper.from_array(np.array([6, 5], np.int64), "sizes")
    nodes = [helper.make_node("Concat", ["a", "b"], ["c"], axis=2),
             helper.make_node("Split", ["c", "sizes"], ["s0", "s1"], axis=2),
             helper.make_node("InstanceNormalization", ["c", "scale", "bias"], ["n"], epsilon=1e-5)]
    graph = helper.make_graph(nodes, "g", [a, b], outs, [scale, bias, sizes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(rows: int):
    rng = np.random.default_rng(100 + rows)
    return {"a": rng.standard_normal((rows, 3, 7, 5)).astype(np.float32),
            "b": rng.standard_normal((rows, 3, 4, 5)).astype(np.float32)}


def _sleeps() -> int:
    return native.pool_stats()[1]


def _wait_for(cond, cap_s: float = 20.0) -> bool:
    end = time.monotonic() + cap_s
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.001)
    return True


@pytest.mark.parametrize("rows", [1, 2, 3, 7])
def test_results_at_1_2_3_threads_are_the_one_thread_bits(pool, rows):
    model, feeds = _model(rows), _feeds(rows)
    got = {}
    for t in (1, 2, 3):
        with nnhal.Session(model, devices=["cpu"], num_thread=t) as s:
            got[t] = s.run(feeds)
    for t in (2, 3):
        for x, y in zip(got[t], got[1]):
            np.testing.assert_array_equal(x, y)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_array_equal(got[1][0], want[0])       # Split: copies
    np.testing.assert_array_equal(got[1][1], want[1])
    # InstanceNormalization of 35 elements a row: sums in another order than onnxruntime's, a few ulps of 1
    np.testing.assert_allclose(got[1][2], want[2], rtol=1e-5, atol=1e-5)


def test_a_one_thread_run_wakes_no_worker(pool):
    model, feeds = _model(7), _feeds(7)
    native.pool_set_spin(0)                     # every job a worker takes ends in a sleep, counted
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as two:
        two.run(feeds)                          # the pool now has 2 threads when the next plan is prepared
        with nnhal.Session(model, devices=["cpu"], num_thread=1) as one:
            one.run(feeds)
            time.sleep(0.05)
            before = _sleeps()
            for _ in range(5):
                one.run(feeds)
            time.sleep(0.05)
            assert _sleeps() == before


def test_a_plan_prepared_on_one_thread_splits_on_two(pool):
    model, feeds = _model(7), _feeds(7)
    native.pool_set_spin(0)
    parallel.set_threads(1)                     # the pool has 1 thread when the plan is prepared
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        before = _sleeps()
        s.run(feeds)                            # its Concat, Split and InstanceNormalization hand parts over
        assert _wait_for(lambda: _sleeps() > before)


def test_a_runs_end_puts_the_idle_workers_to_sleep(pool):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal((48, 40)).astype(np.float32)
    out = np.empty((64, 40), np.float32)
    native.pool_set_spin(60_000_000_000)        # a minute: only the rest sends the workers to sleep sooner
    parallel.set_threads(2)
    parallel.use_pool(True)
    try:
        assert parallel.gemm(a, b, out)         # a job of 2 parts: the worker is woken, then spins
        np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
        before = _sleeps()
        parallel.rest()
        assert _wait_for(lambda: _sleeps() > before)
        # the next job wakes it again, and its parts are all run
        out[:] = np.nan
        assert parallel.gemm(a, b, out)
        np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    finally:
        native.pool_set_spin(DEFAULT_SPIN_NS)
        parallel.rest()
