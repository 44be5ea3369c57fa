"""The cpu device's own thread pool (device/cpu/parallel.py): parts cover the work exactly once, errors
come back to the caller, nested and concurrent use run inline, split elementwise kernels give the bits of
unsplit ones (the same ufunc on each element), and split products stay within the reordered-reduction bound
of nnhal.conformance.tolerance (the pool's blocks and numpy's GEMM may sum in different orders)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from nnhal.conformance.tolerance import assert_within_bound, matmul_bound
from nnhal.device.cpu import parallel


@pytest.fixture
def two_threads(monkeypatch):
    monkeypatch.setenv("NNHAL_CPU_POOL", "1")
    monkeypatch.setattr(parallel, "MIN_PART_WORK", 1)     # split even tiny work, so the tests split
    monkeypatch.setattr(parallel, "MIN_NATIVE_PART_WORK", 1)
    before = parallel._pool.threads
    parallel.set_threads(2)
    parallel.use_pool(True)          # a Session run on this thread before may have chosen BLAS's threads
    yield
    parallel.set_threads(before)


@pytest.mark.parametrize("total,parts,align", [(10, 2, 1), (10, 3, 1), (7, 7, 1), (100, 2, 8), (9, 4, 8),
                                               (1, 2, 1), (0, 2, 1), (65, 3, 16)])
def test_ranges_cover_once(total, parts, align):
    got = parallel.ranges(total, parts, align)
    covered = [i for a, b in got for i in range(a, b)]
    assert covered == list(range(total))
    assert all(a % align == 0 for a, _ in got)
    assert len(got) <= max(1, parts)


def test_parts_run_on_two_threads_and_cover_all(two_threads):
    seen, names = [], set()
    lock = threading.Lock()

    def fn(a, b):
        with lock:
            seen.extend(range(a, b))
            names.add(threading.current_thread().name)

    parallel.for_ranges(1000, 10**9, fn)
    assert sorted(seen) == list(range(1000))
    assert len(names) == 2          # the caller and one worker


def test_error_in_a_worker_reaches_the_caller(two_threads):
    def fn(a, b):
        if a > 0:
            raise ValueError(f"part {a}")

    with pytest.raises(ValueError, match="part"):
        parallel.for_ranges(100, 10**9, fn)
    # the pool still works afterwards
    out = []
    parallel.for_ranges(100, 10**9, lambda a, b: out.append((a, b)))
    assert sorted(out) == [(0, 50), (50, 100)]


def test_nested_and_concurrent_use_runs_inline(two_threads):
    results = []

    def inner(a, b):
        results.append(threading.current_thread().name)

    def outer(a, b):
        parallel.for_ranges(10, 10**9, inner)   # the pool is busy: runs on this thread

    parallel.for_ranges(10, 10**9, outer)
    assert len(results) == 4

    errors = []
    bound = matmul_bound(np.arange(4096, dtype=np.float32).reshape(64, 64), np.arange(4096).reshape(64, 64))

    def user_thread():
        try:
            for _ in range(50):
                x = np.arange(4096, dtype=np.float32).reshape(64, 64)
                y = parallel.matmul(x, x)
                # the pool's row blocks and numpy's one GEMM may sum in different orders (BLAS kernel)
                assert_within_bound(y, x @ x, bound)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=user_thread) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@pytest.mark.parametrize("sa,sb", [((512, 64), (64, 256)), ((4, 512, 64), (64, 256)), ((12, 128, 64), (12, 64, 128)),
                                   ((1, 768), (768, 3072)), ((2, 12, 128, 64), (2, 12, 64, 128)),
                                   ((1, 12, 128, 64), (12, 64, 128)), ((3, 128, 64), (1, 64, 128)),
                                   ((8, 1, 1, 600), (600, 1000)), ((5, 7), (7,)), ((7,), (7, 3))])
def test_matmul_split_matches_numpy(two_threads, sa, sb):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    want = np.matmul(a, b)
    got = parallel.matmul(a, b)
    assert got.shape == want.shape
    # NOTE: numpy may run a product as GEMVs (one-row matrices) where the pool runs GEMMs on row blocks,
    # so the same sums can round apart: within float32 rounding of the K-term dot products
    bound = matmul_bound(a, b)
    assert_within_bound(got, want, bound)
    out = np.empty_like(want)
    assert parallel.matmul(a, b, out) is out
    assert_within_bound(out, want, bound)


@pytest.mark.parametrize("sa,sb,strided", [((32, 1, 128), (128, 384), False), ((16, 1, 128), (128, 96), True),
                                           ((2, 3, 5, 16), (16, 7), False), ((4, 6, 16), (16, 8), True),
                                           ((3, 1, 0), (0, 5), False)])
def test_matmul_of_a_stack_by_a_matrix_is_one_product(sa, sb, strided):
    """A stack times one matrix, unsplit (the default part sizes): the stack's rows as one product when they are a
    view (a strided stack, whose rows are not, and an empty K keep numpy's own product); with and without out."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    if strided:
        a = np.ascontiguousarray(np.swapaxes(a, 0, -2)).swapaxes(0, -2)     # the same values, rows apart
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    bound = matmul_bound(a, b)
    got = parallel.matmul(a, b)
    assert got.shape == want.shape and got.dtype == np.float32
    assert_within_bound(got, want, bound)
    out = np.full(want.shape, np.nan, np.float32)
    assert parallel.matmul(a, b, out) is out
    assert_within_bound(out, want, bound)


@pytest.mark.parametrize("sa,sb", [((8, 56, 56, 24), (8, 1, 1, 24)), ((1, 56, 56, 24), (24,)), ((64, 100), (1, 100)),
                                   ((3, 4), ()), ((2, 5, 7), (2, 5, 7))])
def test_elementwise_split(two_threads, sa, sb):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    want = np.multiply(a, b)
    out = np.empty_like(want)
    parallel.elementwise(np.multiply)(a, b, out=out)
    np.testing.assert_array_equal(out, want)
    want = np.add(a, b)
    if want.shape == a.shape:
        parallel.elementwise(np.add)(a, b, out=a)        # in place
        np.testing.assert_array_equal(a, want)


def test_pool_off_runs_inline(monkeypatch):
    monkeypatch.setenv("NNHAL_CPU_POOL", "0")
    # NNHAL_CPU_POOL is read when a plan chooses (at prepare): =0 wins over a large plan's and a loop's choice
    assert not parallel.choose(10**9) and not parallel.choose(0, iterates=True)
    parallel.use_pool(parallel.choose(10**9))
    try:
        assert not parallel.enabled()
        names = set()
        parallel.for_ranges(100, 10**9, lambda a, b: names.add(threading.current_thread().name))
        assert names == {threading.current_thread().name}
    finally:
        parallel.use_pool(True)


def _small_cnn():
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r0"]),
        helper.make_node("MaxPool", ["r0"], ["m0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["m0"], ["r1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["r1", "wd", "bd"], ["c2"], pads=[1, 1, 1, 1], group=16),
        helper.make_node("Sigmoid", ["c2"], ["s2"]),
        helper.make_node("Mul", ["c2", "s2"], ["a2"]),
        helper.make_node("Conv", ["a2", "w3"], ["c3"]),
        helper.make_node("Add", ["c3", "c3"], ["d3"]),
        helper.make_node("Conv", ["d3", "w4", "b4"], ["c4"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c4", "w5"], ["c5"], pads=[2, 1, 1, 2], strides=[2, 2], dilations=[1, 2]),
        helper.make_node("Clip", ["c5", "lo", "hi"], ["k5"]),
        helper.make_node("GlobalAveragePool", ["k5"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], axis=-1),
    ]
    inits = [w("w1", 16, 3, 3, 3), w("b1", 16), w("wd", 16, 1, 3, 3), w("bd", 16), w("w3", 32, 16, 1, 1),
             w("w4", 64, 32, 3, 3), w("b4", 64), w("w5", 48, 64, 5, 3), w("wf", 10, 48),
             numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
             numpy_helper.from_array(np.array(0.5, np.float32), "hi")]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 64, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_model_split_over_the_pool_matches_the_unsplit_run(monkeypatch):
    import nnhal

    monkeypatch.setattr(parallel, "MIN_PART_WORK", 1)
    monkeypatch.setattr(parallel, "MIN_NATIVE_PART_WORK", 1)
    x = np.random.default_rng(3).standard_normal((4, 3, 64, 64)).astype(np.float32)
    results = {}
    for mode in ("0", "1"):
        monkeypatch.setenv("NNHAL_CPU_POOL", mode)
        with nnhal.Session(_small_cnn(), devices=["cpu"], num_thread=2) as s:
            results[mode] = s.run({"x": x})[0]
    # the same kernels on the same blocks; BLAS may pick another path for a split GEMM (fp32 rounding)
    np.testing.assert_allclose(results["1"], results["0"], rtol=1e-5, atol=1e-7)


def test_a_forked_child_runs_without_the_parents_workers(monkeypatch):
    """A child forked after runs used the pools has none of their threads: it must start its own, not
    wait forever for workers that do not exist."""
    import os
    import signal

    import nnhal

    monkeypatch.setattr(parallel, "MIN_NATIVE_PART_WORK", 1)
    monkeypatch.setenv("NNHAL_CPU_POOL", "1")
    x = np.random.default_rng(4).standard_normal((4, 3, 64, 64)).astype(np.float32)
    with nnhal.Session(_small_cnn(), devices=["cpu"], num_thread=2) as s:
        want = s.run({"x": x})[0]
        pid = os.fork()
        if pid == 0:                      # the child: run again, exit 0 when the result is the same
            code = 1
            try:
                signal.alarm(60)
                code = 0 if np.allclose(s.run({"x": x})[0], want, rtol=1e-5, atol=1e-7) else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status}"


def test_plans_choose_the_pools_by_the_size_of_their_products(monkeypatch):
    monkeypatch.delenv("NNHAL_CPU_POOL", raising=False)
    monkeypatch.setattr(parallel, "avx512", lambda: True)
    assert not parallel.choose(9_000)                           # MobileNetV3 at batch 1: BLAS threads
    assert parallel.choose(400_000)                             # batch 8: the pools
    monkeypatch.setattr(parallel, "avx512", lambda: False)      # the AVX2 machine's threshold
    assert not parallel.choose(256)                             # a KV-cache decoder step: BLAS threads
    assert parallel.choose(9_000)
    monkeypatch.setenv("NNHAL_CPU_POOL", "1")
    assert parallel.choose(0)
    monkeypatch.setenv("NNHAL_CPU_POOL", "0")
    assert not parallel.choose(10**9)
    monkeypatch.delenv("NNHAL_CPU_POOL")
    parallel.use_pool(False)
    try:
        assert parallel.threads() == 1 and not parallel.native_pool()
    finally:
        parallel.use_pool(True)
