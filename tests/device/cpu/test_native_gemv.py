"""The native one-row GEMM (nn_gemv.h: c (1, n) = a (1, k) @ b (k, n), b row major), which a prepared native Gemm
runs instead of the BLAS for a small product, against a float64 product: column blocks full and partial, split by
columns over parts, a strided row of b, the bias and activation epilogue; a transposed b or a large product still
goes to the BLAS (the same bound holds)."""
from __future__ import annotations

import numpy as np
import pytest

import nnhal
from nnhal.conformance.tolerance import assert_within_bound, matmul_bound
from nnhal.device.cpu import native

pytestmark = pytest.mark.skipif(not native.available(), reason="the native kernels are not built")


def _check(k: int, n: int, parts: int, by_cols: bool, b: np.ndarray, relu: bool = False, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((1, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    gemm = native.Gemm(b, bias, native.make_act("relu" if relu else None))
    y = np.full((1, n), np.nan, np.float32)
    gemm.run(a, y, parts, 1, by_cols)
    want = a.astype(np.float64) @ b.astype(np.float64) + bias
    # the bias adds one more rounding: the bound of a product with one more term, |bias| its magnitude
    bound = matmul_bound(np.concatenate([a, np.ones((1, 1), np.float32)], axis=1),
                         np.concatenate([b, bias[None]], axis=0))
    if relu:
        want = np.maximum(want, 0)      # 1-Lipschitz: the bound holds
    assert_within_bound(y, want, bound)


@pytest.mark.parametrize("k", [1, 40, 64])
@pytest.mark.parametrize("n", [1, 7, 63, 64, 65, 192])
def test_one_row_products_match_float64(k, n):
    b = np.random.default_rng(k * 1000 + n).standard_normal((k, n)).astype(np.float32)
    _check(k, n, 1, False, b)


@pytest.mark.parametrize("parts", [2, 3])
def test_one_row_products_split_by_columns(parts):
    b = np.random.default_rng(parts).standard_normal((40, 200)).astype(np.float32)
    _check(40, 200, parts, True, b, relu=True)


def test_a_row_strided_b_a_transposed_b_and_a_large_product():
    rng = np.random.default_rng(3)
    wide = rng.standard_normal((64, 300)).astype(np.float32)
    _check(64, 192, 1, False, wide[:, :192])                 # rows of b 300 floats apart
    _check(64, 192, 1, False, np.ascontiguousarray(wide[:, :192].T).T)     # transposed: the BLAS
    _check(512, 256, 1, False, rng.standard_normal((512, 256)).astype(np.float32))   # above NN_GEMV_MAX


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_a_recurrent_layer_of_one_row_projects_by_dot_products(op, direction, monkeypatch):
    """One step at batch 1 (a Loop body's LSTM): the layer projects X W^T row by row in C (kernels.c
    nn_rnn_project), on the pool, against the reference kernel."""
    from tests.device.cpu import test_native_recurrent as rec

    monkeypatch.setattr(rec, "T", 1)
    monkeypatch.setenv("NNHAL_CPU_POOL", "1")
    model, feeds = rec._model(op, direction, batch=1, hidden=19, states=True)
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = s.run(feeds)
        assert s.subgraphs[0].stats["kernels"][s.subgraphs[0].nodes[0].name] == "native"
    rec._check(got, rec._reference(model, feeds, monkeypatch), op)


@pytest.mark.parametrize("rows", [1, 2])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("parts", [1, 2])
def test_a_few_rows_above_the_register_gemv_run_as_blas_gemvs(rows, transposed, parts):
    """rows <= NN_GEMV_ROWS of a product too large for nn_gemv_f32, split by columns: one BLAS GEMV per row
    (b row major or read transposed) and the bias and activation, within the reordered-sum bound."""
    rng = np.random.default_rng(rows * 10 + parts)
    k, n = 256, 520
    b = rng.standard_normal((k, n)).astype(np.float32)
    if transposed:
        b = np.ascontiguousarray(b.T).T
    a = rng.standard_normal((rows, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    y = np.full((rows, n), np.nan, np.float32)
    native.Gemm(b, bias, native.make_act("relu")).run(a, y, parts, 1, 1)
    want = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0)
    bound = matmul_bound(np.concatenate([a, np.ones((rows, 1), np.float32)], axis=1),
                         np.concatenate([b, bias[None]], axis=0))
    assert_within_bound(y, want, bound)


@pytest.mark.parametrize("rows", [1, 2, 3, 32])
@pytest.mark.parametrize("check", ["0", "1"])
def test_a_decoder_steps_projection_with_bias_and_residual(rows, check, monkeypatch):
    """MatMul + bias + residual Add (a decoder step's output projection, a transformer's second FFN product):
    for a few rows the prepared native GEMVs with the bias, for more the native pool's GEMM with it; then the
    residual. Both plan paths."""
    from onnx import helper, numpy_helper

    from tests.conftest import make_model, vinfo

    monkeypatch.setenv("NNHAL_CHECK", check)
    rng = np.random.default_rng(rows)
    k, n = 1024, 256
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", ["bias", "p"], ["h"]),
             helper.make_node("Add", ["h", "res"], ["y"])]
    model = make_model(nodes, [vinfo("x", [1, rows, k]), vinfo("res", [1, rows, n])], [vinfo("y", [1, rows, n])],
                       [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "bias")])
    x = rng.standard_normal((1, rows, k)).astype(np.float32)
    res = rng.standard_normal((1, rows, n)).astype(np.float32)
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        (got,) = s.run({"x": x, "res": res})
        assert len(s.subgraphs[0].device_graph.steps) == 1            # the Adds fused into the MatMul
    ones = np.ones((1, rows, 2), np.float32)
    a = np.concatenate([x, ones], axis=-1)
    b = np.concatenate([w, bias[None], np.zeros((1, n), np.float32)], axis=0)
    want = x.astype(np.float64) @ w.astype(np.float64) + bias + res
    # the bias and the residual: one more term and one more rounding of the residual's magnitude
    bound = matmul_bound(a, b) + 2 * np.finfo(np.float32).eps * np.abs(res)
    assert_within_bound(got, want, bound)


@pytest.mark.parametrize("layout", ["contiguous", "strided", "vector", "float64"])
@pytest.mark.parametrize("rows", [1, 2])
@pytest.mark.parametrize("residual", [False, True])
def test_gemm_first_few_rows_take_the_direct_call_or_fall_back_alike(layout, rows, residual):
    """kernels/matmul.py gemm_first for a few rows times the prepared constant B: its direct native call (a
    contiguous float32 A) and the general path it falls back to (a strided A: the native GEMVs on its copy; a
    float64 A: numpy's GEMV per row), a 1-D A, with the bias and a residual step, against a float64 product;
    the MatMul's own ``run`` is never reached."""
    from nnhal.device.cpu.kernels.matmul import gemm_first

    rng = np.random.default_rng(rows)
    k, n = 300, 70
    if layout == "vector":
        rows = 1
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    shape = (n,) if layout == "vector" else (1, rows, n)
    a = rng.standard_normal((1, rows, 2 * k)).astype(np.float32)[..., ::2] if layout == "strided" else \
        rng.standard_normal((1, rows, k)).astype(np.float64 if layout == "float64" else np.float32)
    a = a.reshape(k) if layout == "vector" else a
    res = rng.standard_normal(shape).astype(np.float32)

    def unreachable(inputs, outputs):
        raise AssertionError("the few rows' product fell through to the MatMul's own path")

    run = gemm_first(unreachable, w, bias, shape, None, False, ((np.add, 2),) if residual else ())
    y = np.full(shape, np.nan, np.float32)
    (got,) = run([a, w, res], [y])
    assert got is y
    a64 = a.astype(np.float64).reshape(-1, k)
    want = (a64 @ w.astype(np.float64) + bias).reshape(shape) + (res if residual else 0)
    a1 = np.concatenate([a.astype(np.float32).reshape(-1, k), np.ones((a64.shape[0], 1), np.float32)], axis=1)
    bound = matmul_bound(a1, np.concatenate([w, bias[None]], axis=0)).reshape(shape)
    if residual:
        bound = bound + 2 * np.finfo(np.float32).eps * np.abs(res)
    assert_within_bound(got, want, bound)


@pytest.mark.parametrize("rows", [3, 16, 33])
def test_gemm_first_many_rows_with_a_residual_take_the_native_gemm(rows):
    """kernels/matmul.py gemm_first for more than GEMV_ROWS rows with the bias and a residual step (a
    transformer's second FFN product): the native pool's GEMM with the bias, then the residual in place, against
    a float64 product; the MatMul's own ``run`` (numpy's GEMM and the epilogue as passes) is never reached."""
    from nnhal.device.cpu import native
    from nnhal.device.cpu.kernels.matmul import gemm_first

    if not native.available():
        pytest.skip("the native kernels are not built")
    rng = np.random.default_rng(rows)
    k, n = 256, 128
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    shape = (1, rows, n)
    a = rng.standard_normal((1, rows, k)).astype(np.float32)
    res = rng.standard_normal(shape).astype(np.float32)

    def unreachable(inputs, outputs):
        raise AssertionError("the product with a residual fell through to the MatMul's own path")

    run = gemm_first(unreachable, w, bias, shape, None, False, ((np.add, 2),))
    y = np.full(shape, np.nan, np.float32)
    (got,) = run([a, w, res], [y])
    assert got is y
    want = (a.astype(np.float64).reshape(-1, k) @ w.astype(np.float64) + bias).reshape(shape) + res
    a1 = np.concatenate([a.reshape(-1, k), np.ones((rows, 1), np.float32)], axis=1)
    bound = matmul_bound(a1, np.concatenate([w, bias[None]], axis=0)).reshape(shape) \
        + 2 * np.finfo(np.float32).eps * np.abs(res)
    assert_within_bound(got, want, bound)


@pytest.mark.parametrize("k", [1, 7, 256])
@pytest.mark.parametrize("n", [1, 31, 32, 33, 70, 520])
@pytest.mark.parametrize("transposed", [False, True])
def test_a_packed_gemm_runs_a_few_rows_over_its_panels(k, n, transposed):
    """Gemm(..., pack=True) (nn_gemv.h nn_gemv_pack / nn_gemv_packed_f32): b packed in zero-padded panels of 32
    columns at construction, read by the GEMVs of 1 or 2 rows split by columns over 1-3 parts (a part's range a
    multiple of the panel; odd k ends on one row of b; a partial last panel), with the bias and activation,
    against a float64 product within the reordered-sum bound; more rows, or split by rows, take the BLAS as
    before from the same object."""
    rng = np.random.default_rng(k * 1000 + n)
    b = rng.standard_normal((k, n)).astype(np.float32)
    if transposed:
        b = np.ascontiguousarray(b.T).T
    bias = rng.standard_normal(n).astype(np.float32)
    gemm = native.Gemm(b, bias, native.make_act("relu"), True)
    for rows, parts, by_cols in [(1, 1, 1), (1, 2, 1), (2, 3, 1), (2, 2, 0), (3, 2, 1), (5, 2, 0)]:
        a = rng.standard_normal((rows, k)).astype(np.float32)
        y = np.full((rows, n), np.nan, np.float32)
        gemm.run(a, y, parts, 1, by_cols)
        want = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0)
        bound = matmul_bound(np.concatenate([a, np.ones((rows, 1), np.float32)], axis=1),
                             np.concatenate([b, bias[None]], axis=0))
        assert_within_bound(y, want, bound)


def test_a_packed_gemm_keeps_its_own_copy_of_b():
    """The panels are packed once, at construction: the product is of b as it was then (the planner hands a
    constant, never changed after; the copy is the Gemm's own, freed with it)."""
    rng = np.random.default_rng(5)
    b = rng.standard_normal((64, 96)).astype(np.float32)
    want_b = b.copy()
    gemm = native.Gemm(b, None, native.make_act(None), True)
    b[:] = 0
    a = rng.standard_normal((1, 64)).astype(np.float32)
    y = np.empty((1, 96), np.float32)
    gemm.run(a, y, 1, 1, 1)
    assert_within_bound(y, a.astype(np.float64) @ want_b.astype(np.float64), matmul_bound(a, want_b))


@pytest.mark.parametrize("cap", [0, 1 << 20])
@pytest.mark.parametrize("rows", [1, 2, 3])
def test_gemm_first_packs_a_few_rows_constant_b_up_to_the_cap(cap, rows, monkeypatch):
    """gemm_first asks the prepared Gemm for the packed copy only for a product of at most GEMV_ROWS rows whose B
    is at most matmul.PACK_MAX_BYTES (a larger one keeps the BLAS GEMV); either way the product is right."""
    from nnhal.device.cpu.kernels import matmul

    made = []
    real = native.Gemm

    def recording(b, bias, act, pack=False):
        made.append(pack)
        return real(b, bias, act, pack)

    monkeypatch.setattr(native, "Gemm", recording)
    monkeypatch.setattr(matmul, "PACK_MAX_BYTES", cap)
    rng = np.random.default_rng(rows)
    k, n = 128, 96
    w = rng.standard_normal((k, n)).astype(np.float32)
    shape = (1, rows, n)

    def unreachable(inputs, outputs):
        raise AssertionError("fell through to the MatMul's own path")

    run = matmul.gemm_first(unreachable, w, None, shape, None, False)
    assert made == [rows <= matmul.GEMV_ROWS and w.nbytes <= cap]
    a = rng.standard_normal((1, rows, k)).astype(np.float32)
    (got,) = run([a, w], [np.full(shape, np.nan, np.float32)])
    a2 = a.reshape(rows, k)
    assert_within_bound(got.reshape(rows, n), a2.astype(np.float64) @ w.astype(np.float64), matmul_bound(a2, w))
