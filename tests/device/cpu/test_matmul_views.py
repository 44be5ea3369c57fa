"""Attention's head split, k transpose and head merge read and written by the MatMuls as views
(device/cpu/matmul_views.py), on both plan paths, against float64 products within the reordered-sum bound."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import nnhal
from nnhal.conformance.tolerance import assert_within_bound, matmul_bound, unit_roundoff
from tests.conftest import make_model, vinfo

SCALE = np.float32(0.125)


@pytest.fixture(params=["straight", "checked"])
def path(request, monkeypatch):
    monkeypatch.setenv("NNHAL_CHECK", "1" if request.param == "checked" else "0")
    return request.param


def run(model, feeds):
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = s.run(feeds)
        steps = s.subgraphs[0].device_graph.steps
    return got, [(st.node.op_type, st.kernel_name) for st in steps]


def product(a, b, bias):
    """(a @ b) * SCALE + bias in float64, and the bound of a float32 evaluation in any order: the sums'
    reduction bound scaled, plus one rounding each for the scaling and the bias add."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    magnitude = np.abs(a64) @ np.abs(b64) * float(SCALE)
    want = a64 @ b64 * float(SCALE) + bias
    bound = matmul_bound(a, b) * float(SCALE) + 2 * unit_roundoff() * (magnitude + np.abs(bias))
    return want, bound


def scores_model(batch, seq, heads, dim, k_perm, merge):
    """q, k as (batch, seq, heads, dim) inputs; the scores (q k^T) * SCALE + mask per head, with k read through
    ``k_perm`` ((0, 2, 3, 1): head split and transpose in one; (0, 2, 1, 3) then (0, 1, 3, 2)); with
    ``merge``, the product's heads merged back by Transpose (0, 2, 1, 3) and a Reshape."""
    nodes = [helper.make_node("Transpose", ["q"], ["qh"], perm=[0, 2, 1, 3])]
    if k_perm == (0, 2, 3, 1):
        nodes.append(helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 3, 1]))
    else:
        nodes += [helper.make_node("Transpose", ["k"], ["kh"], perm=[0, 2, 1, 3]),
                  helper.make_node("Transpose", ["kh"], ["kt"], perm=[0, 1, 3, 2])]
    nodes += [helper.make_node("MatMul", ["qh", "kt"], ["s"]), helper.make_node("Mul", ["s", "scale"], ["sc"]),
              helper.make_node("Add", ["sc", "mask"], ["y" if not merge else "p"])]
    out_shape = [batch, heads, seq, seq]
    if merge:       # seq == dim here: the merged product is (batch, seq, heads * seq)
        nodes += [helper.make_node("Transpose", ["p"], ["pm"], perm=[0, 2, 1, 3]),
                  helper.make_node("Reshape", ["pm", "shape"], ["y"])]
        out_shape = [batch, seq, heads * seq]
    inits = [numpy_helper.from_array(np.array(SCALE), "scale"),
             numpy_helper.from_array(np.triu(np.full((seq, seq), -1e4, np.float32), 1), "mask"),
             numpy_helper.from_array(np.array([batch, seq, heads * seq], np.int64), "shape")]
    io = [vinfo("q", [batch, seq, heads, dim]), vinfo("k", [batch, seq, heads, dim])]
    return make_model(nodes, io, [vinfo("y", out_shape)], inits)


@pytest.mark.parametrize("batch,seq,heads,dim", [(1, 64, 4, 64), (2, 13, 3, 13), (1, 7, 5, 7)])
@pytest.mark.parametrize("k_perm", [(0, 2, 3, 1), (0, 1, 3, 2)])
@pytest.mark.parametrize("merge", [False, True])
def test_head_split_and_merge_fold_into_the_product(path, batch, seq, heads, dim, k_perm, merge):
    rng = np.random.default_rng(seq + heads)
    q, k = (rng.standard_normal((batch, seq, heads, dim), dtype=np.float32) for _ in range(2))
    (got,), steps = run(scores_model(batch, seq, heads, dim, k_perm, merge), {"q": q, "k": k})
    assert [op for op, _ in steps] == ["MatMul"] + (["Reshape"] if merge else []), steps
    assert steps[0][1] == "fast, views"
    mask = np.triu(np.full((seq, seq), -1e4), 1)
    want, bound = product(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 3, 1), mask)
    if merge:
        want, bound = (x.transpose(0, 2, 1, 3).reshape(batch, seq, heads * seq) for x in (want, bound))
    assert_within_bound(got, want, bound)


def test_a_decoder_steps_cached_keys_are_read_transposed(path):
    """gpt_kv's k^T: the past keys concatenated with the new one, (1, heads, t, d) -> (1, heads, d, t)."""
    rng = np.random.default_rng(5)
    heads, t, d = 4, 65, 64
    nodes = [helper.make_node("Concat", ["past", "new"], ["keys"], axis=2),
             helper.make_node("Transpose", ["keys"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Mul", ["s", "scale"], ["y"])]
    inits = [numpy_helper.from_array(np.array(SCALE), "scale")]
    model = make_model(nodes, [vinfo("past", [1, heads, t - 1, d]), vinfo("new", [1, heads, 1, d]),
                               vinfo("q", [1, heads, 1, d])],
                       [vinfo("y", [1, heads, 1, t]), vinfo("keys", [1, heads, t, d])], inits)
    feeds = {"past": rng.standard_normal((1, heads, t - 1, d), dtype=np.float32),
             "new": rng.standard_normal((1, heads, 1, d), dtype=np.float32),
             "q": rng.standard_normal((1, heads, 1, d), dtype=np.float32)}
    (got, keys), steps = run(model, feeds)
    assert ("Transpose", "swap") not in steps and ("MatMul", "fast, views") in steps, steps
    want_keys = np.concatenate([feeds["past"], feeds["new"]], axis=2)
    np.testing.assert_array_equal(keys, want_keys)                       # a copy: exact
    want, bound = product(feeds["q"], want_keys.transpose(0, 1, 3, 2), 0.0)
    assert_within_bound(got, want, bound)


def test_a_transpose_read_elsewhere_or_not_blas_readable_stays(path):
    """A k^T also read by an Add, and a perm moving the last axis first (no unit stride in either matrix
    axis), keep their Transposes; the results are still right."""
    rng = np.random.default_rng(9)
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Add", ["kt", "kt"], ["twice"]),
             helper.make_node("Transpose", ["w"], ["wt"], perm=[2, 0, 1]),
             helper.make_node("MatMul", ["wt", "r"], ["u"])]
    model = make_model(nodes, [vinfo("q", [3, 6, 6]), vinfo("k", [3, 6, 6]), vinfo("w", [6, 3, 6]), vinfo("r", [3, 4])],
                       [vinfo("s", [3, 6, 6]), vinfo("twice", [3, 6, 6]), vinfo("u", [6, 6, 4])])
    feeds = {n: rng.standard_normal(shape, dtype=np.float32) for n, shape in
             (("q", (3, 6, 6)), ("k", (3, 6, 6)), ("w", (6, 3, 6)), ("r", (3, 4)))}
    (s, twice, u), steps = run(model, feeds)
    assert [op for op, _ in steps].count("Transpose") == 2 and ("MatMul", "fast, views") not in steps, steps
    kt, wt = feeds["k"].transpose(0, 2, 1), feeds["w"].transpose(2, 0, 1)
    assert_within_bound(s, feeds["q"].astype(np.float64) @ kt, matmul_bound(feeds["q"], kt))
    np.testing.assert_array_equal(twice, kt + kt)
    assert_within_bound(u, wt.astype(np.float64) @ feeds["r"], matmul_bound(wt, feeds["r"]))


def rows_model(seq, heads, dim, q_rows, k_rows):
    """A fused projection's output x (seq, 3 * heads * dim) split into q and k as optimizer/movement.py
    leaves a collapsed head split: Reshape to rows of ``dim``, Gather of constant rows, Reshape to
    (1, heads, seq, dim); k then transposed; the scores q k^T."""
    nodes = [helper.make_node("Reshape", ["x", "rows_shape"], ["m"])]
    for name, rows in (("q", q_rows), ("k", k_rows)):
        nodes += [helper.make_node("Gather", ["m", f"{name}_rows"], [f"{name}_g"], axis=0),
                  helper.make_node("Reshape", [f"{name}_g", "head_shape"], [f"{name}h"])]
    nodes += [helper.make_node("Transpose", ["kh"], ["kt"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["qh", "kt"], ["y"])]
    inits = [numpy_helper.from_array(np.array([seq * 3 * heads, dim], np.int64), "rows_shape"),
             numpy_helper.from_array(np.array([1, heads, seq, dim], np.int64), "head_shape"),
             numpy_helper.from_array(np.asarray(q_rows, np.int64), "q_rows"),
             numpy_helper.from_array(np.asarray(k_rows, np.int64), "k_rows")]
    return make_model(nodes, [vinfo("x", [seq, 3 * heads * dim])], [vinfo("y", [1, heads, seq, seq])], inits)


@pytest.mark.parametrize("affine", [True, False])
def test_a_row_gather_head_split_is_read_as_a_strided_view(path, affine):
    """q rows t * 3H + h and k rows t * 3H + H + h (a head split of a fused q/k/v projection) are affine
    grids: the MatMul reads the projection with strides, no Gather is left. Shuffled rows are not: the
    Gathers stay. Both against float64."""
    seq, heads, dim = 10, 3, 8
    rng = np.random.default_rng(11)
    grid = np.array([[t * 3 * heads + h for t in range(seq)] for h in range(heads)]).reshape(-1)
    q_rows, k_rows = grid, grid + heads
    if not affine:
        q_rows = rng.permutation(grid)
    x = rng.standard_normal((seq, 3 * heads * dim), dtype=np.float32)
    (got,), steps = run(rows_model(seq, heads, dim, q_rows, k_rows), {"x": x})
    ops = [op for op, _ in steps]
    assert ops.count("Gather") == (0 if affine else 1) and "Transpose" not in ops, steps
    m = x.reshape(-1, dim)
    q, k = (m[r].reshape(1, heads, seq, dim) for r in (q_rows, k_rows))
    kt = k.transpose(0, 1, 3, 2)
    assert_within_bound(got, q.astype(np.float64) @ kt, matmul_bound(q, kt))


def test_a_merge_written_through_a_view_is_then_read_through_one(path):
    """p = a @ b merged by Transpose (0, 2, 1, 3) (the first MatMul writes the merged tensor), then read
    transposed by a second MatMul: the second reads the merged tensor, not p (which no longer exists)."""
    heads, seq, dim = 3, 6, 5
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("MatMul", ["a", "b"], ["p"]),
             helper.make_node("Transpose", ["p"], ["m"], perm=[0, 2, 1, 3]),
             helper.make_node("Transpose", ["m"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("MatMul", ["q", "t"], ["y"])]
    model = make_model(nodes, [vinfo("a", [1, heads, seq, dim]), vinfo("b", [1, heads, dim, dim]),
                               vinfo("q", [1, heads, seq, dim])], [vinfo("y", [1, heads, seq, seq])])
    feeds = {n: rng.standard_normal(s, dtype=np.float32) for n, s in
             (("a", (1, heads, seq, dim)), ("b", (1, heads, dim, dim)), ("q", (1, heads, seq, dim)))}
    (got,), steps = run(model, feeds)
    assert [op for op, _ in steps] == ["MatMul", "MatMul"], steps
    p = feeds["a"].astype(np.float64) @ feeds["b"]
    t = p.transpose(0, 1, 3, 2)                 # (0, 2, 1, 3) then (0, 2, 3, 1)
    want = feeds["q"] @ t
    # p carries its own float32 rounding into the second product: the chain's bound plus |q| @ (bound of p)
    p_bound = matmul_bound(feeds["a"], feeds["b"])
    bound = matmul_bound(feeds["q"], t.astype(np.float32)) + np.abs(feeds["q"].astype(np.float64)) @ \
        p_bound.transpose(0, 1, 3, 2) * (1 + 4 * unit_roundoff())
    assert_within_bound(got, want, bound)
