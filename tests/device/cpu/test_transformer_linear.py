"""A transformer's linear layers on the cpu device against float64, on the generated plan and on the
interpreting one (NNHAL_CHECK=1): the tanh-approximated Gelu chain (cpu/gelu_tanh.py) as one native pass,
alone and in a MatMul's epilogue; products of a few rows (GEMV rows); Gemm as the native GEMM."""
from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import helper, numpy_helper

import nnhal
from nnhal.conformance.tolerance import assert_within_bound, matmul_bound, unit_roundoff
from nnhal.device.cpu import native
from nnhal.hostkernels.fused import epilogue_of
from tests.conftest import make_model, vinfo

pytestmark = pytest.mark.skipif(not native.available(), reason="the tanh Gelu is fused only with the native kernels")

U = unit_roundoff(np.float32)
SLOPE = 1.13     # the largest |d gelu_tanh / dx| (at x ~ 2.4): how much an error of the input can grow


def gelu_tanh64(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def own_bound(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The float32 chain's or the kernel's own error: a few roundings of |x|-sized terms (x^3's, the sums,
    tanh's or sigmoid's 2-3 ulp, the last product) and of the result, generously 16 u |x| + 8 u |y|."""
    return 16 * U * np.abs(np.asarray(x, np.float64)) + 8 * U * np.abs(np.asarray(y, np.float64))


def const(name, value):
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


CONSTS = [const("c3", 3.0), const("cubic", 0.044715), const("s2pi", math.sqrt(2 / math.pi)), const("one", 1.0),
          const("half", 0.5)]


def chain(x: str, y: str, cube: str = "mul", half_first: bool = False) -> list:
    """torch.onnx's GELU(approximate='tanh'): x^3 as Mul(x, Mul(x, x)) or Pow(x, 3); 0.5 last or first."""
    n = helper.make_node
    nodes = [n("Pow", [x, "c3"], ["cu"])] if cube == "pow" else [n("Mul", [x, x], ["sq"]), n("Mul", [x, "sq"], ["cu"])]
    nodes += [n("Mul", ["cubic", "cu"], ["k"]), n("Add", [x, "k"], ["in"]), n("Mul", ["s2pi", "in"], ["u"]),
              n("Tanh", ["u"], ["t"]), n("Add", ["one", "t"], ["t1"])]
    if half_first:
        return nodes + [n("Mul", [x, "half"], ["hx"]), n("Mul", ["hx", "t1"], [y])]
    return nodes + [n("Mul", [x, "t1"], ["xt"]), n("Mul", ["half", "xt"], [y])]


def run(model, feeds, monkeypatch, checked: bool):
    monkeypatch.setenv("NNHAL_CHECK", "1" if checked else "0")
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = s.run(feeds)
        steps = s.subgraphs[0].device_graph.steps
    return got, steps


@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("cube,half_first", [("mul", False), ("pow", False), ("mul", True)])
def test_the_chain_is_one_native_gelu_within_a_few_ulp(monkeypatch, checked, cube, half_first):
    x = np.linspace(-9, 9, 3 * 4001, dtype=np.float32).reshape(3, 4001)
    x[0, :5] = [0.0, -0.0, 1e-30, -1e-30, 40.0]
    model = make_model(chain("x", "y", cube, half_first), [vinfo("x", [3, 4001])], [vinfo("y", [3, 4001])], CONSTS)
    (got,), steps = run(model, {"x": x}, monkeypatch, checked)
    assert [(st.node.op_type, st.node.attrs.get("approximate")) for st in steps] == [("Gelu", "tanh")]
    want = gelu_tanh64(x)
    assert_within_bound(got, want, own_bound(x, want))


def test_an_intermediate_read_elsewhere_keeps_the_chain(monkeypatch):
    x = np.random.default_rng(1).standard_normal((4, 9)).astype(np.float32) * 3
    model = make_model(chain("x", "y"), [vinfo("x", [4, 9])], [vinfo("y", [4, 9]), vinfo("t", [4, 9])], CONSTS)
    (got, t), steps = run(model, {"x": x}, monkeypatch, False)
    assert "Gelu" not in [st.node.op_type for st in steps] and "Tanh" in [st.node.op_type for st in steps]
    want = gelu_tanh64(x)
    assert_within_bound(got, want, own_bound(x, want))


def test_other_constants_are_not_a_gelu(monkeypatch):
    consts = [c if c.name != "cubic" else const("cubic", 0.05) for c in CONSTS]
    x = np.random.default_rng(2).standard_normal((2, 7)).astype(np.float32)
    model = make_model(chain("x", "y"), [vinfo("x", [2, 7])], [vinfo("y", [2, 7])], consts)
    (got,), steps = run(model, {"x": x}, monkeypatch, False)
    assert "Gelu" not in [st.node.op_type for st in steps]
    x64 = x.astype(np.float64)
    want = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.05 * x64 ** 3)))
    assert_within_bound(got, want, own_bound(x, want))


@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("batch,rows,k,n", [(1, 64, 32, 128), (2, 37, 29, 61), (1, 1, 16, 300), (1, 2, 64, 130)])
def test_matmul_bias_gelu_tanh_is_one_step(monkeypatch, checked, batch, rows, k, n):
    rng = np.random.default_rng(rows)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", ["bias", "p"], ["h"]),
             *chain("h", "y")]
    model = make_model(nodes, [vinfo("x", [batch, rows, k])], [vinfo("y", [batch, rows, n])],
                       [const("w", w), const("bias", bias), *CONSTS])
    x = rng.standard_normal((batch, rows, k)).astype(np.float32) * 2
    (got,), steps = run(model, {"x": x}, monkeypatch, checked)
    (step,) = steps
    assert [e.op for e in epilogue_of(step.node)] == ["Add", "GeluTanh"]
    h = x.astype(np.float64) @ w + bias
    want = gelu_tanh64(h)
    # the product's and the bias add's rounding, grown by the Gelu's slope, plus the Gelu's own
    bound = SLOPE * (matmul_bound(x, w) + 2 * U * np.abs(h)) + own_bound(h, want)
    assert_within_bound(got, want, bound)


@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("rows,bias", [(1, True), (2, True), (1, False), (3, True)])
def test_a_few_rows_times_a_constant_matrix_with_its_bias(monkeypatch, checked, rows, bias):
    """A decoder's one-token products (kernels/matmul.py's GEMV rows, up to GEMV_ROWS) and the GEMM just past."""
    rng = np.random.default_rng(rows)
    w = (rng.standard_normal((96, 257)) / 10).astype(np.float32)
    b = rng.standard_normal(257).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p" if bias else "y"])]
    nodes += [helper.make_node("Add", ["p", "b"], ["y"])] if bias else []
    model = make_model(nodes, [vinfo("x", [1, rows, 96])], [vinfo("y", [1, rows, 257])], [const("w", w), const("b", b)])
    x = rng.standard_normal((1, rows, 96)).astype(np.float32)
    (got,), _ = run(model, {"x": x}, monkeypatch, checked)
    want = x.astype(np.float64) @ w + (b if bias else 0)
    assert_within_bound(got, want, matmul_bound(x, w) + 2 * U * np.abs(want))


@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("rows,trans_b,alpha,beta,c_shape,relu", [
    (50, 1, 1.0, 1.0, (257,), False), (50, 0, 0.5, 2.0, (1, 257), False), (1, 1, 1.0, 1.0, (257,), False),
    (2, 0, 1.0, 0.0, (257,), False), (7, 1, 1.5, 1.0, None, False), (9, 1, 1.0, 1.0, (9, 257), False),
    (33, 1, 1.0, 1.0, (257,), True)])
def test_a_linear_gemm_runs_the_native_gemm(monkeypatch, checked, rows, trans_b, alpha, beta, c_shape, relu):
    """kernels/gemm.py's GemmNative (alpha and beta folded, B packed once; a few rows as GEMVs), and the host's
    pooled Gemm where C is not a row or an activation is fused."""
    rng = np.random.default_rng(rows)
    b = (rng.standard_normal((257, 96) if trans_b else (96, 257)) / 10).astype(np.float32)
    c = rng.standard_normal(c_shape).astype(np.float32) if c_shape else None
    inits = [const("b", b)] + ([const("c", c)] if c_shape else [])
    nodes = [helper.make_node("Gemm", ["x", "b"] + (["c"] if c_shape else []), ["g" if relu else "y"], transB=trans_b,
                              alpha=alpha, beta=beta)]
    nodes += [helper.make_node("Relu", ["g"], ["y"])] if relu else []
    model = make_model(nodes, [vinfo("x", [rows, 96])], [vinfo("y", [rows, 257])], inits)
    x = rng.standard_normal((rows, 96)).astype(np.float32)
    (got,), steps = run(model, {"x": x}, monkeypatch, checked)
    (step,) = steps
    assert step.kernel_name == ("native" if c_shape != (9, 257) else "pooled")
    bt = b.T if trans_b else b
    want = alpha * (x.astype(np.float64) @ bt) + (beta * c if c_shape else 0)
    want = np.maximum(want, 0) if relu else want
    # the product's sums, then the roundings of alpha's and beta's scalings and of the bias add
    terms = abs(alpha) * np.abs(x.astype(np.float64) @ bt) + (np.abs(beta * c) if c_shape else 0)
    assert_within_bound(got, want, abs(alpha) * matmul_bound(x, bt) + 3 * U * terms)


@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("rows,depth,sides,muls", [(50, 64, "both", 0), (50, 64, "q", 0), (9, 16, "k", 0),
                                                   (200, 8, "both", 1), (200, 8, "q", 1), (128, 24, "both", 1),
                                                   (50, 64, "shared", 1)])
def test_scalar_scalings_of_attention_operands_move_onto_the_product(monkeypatch, checked, rows, depth, sides, muls):
    """cpu/scale_fold.py: torch's SDPA export, MatMul(Mul(q, s), Mul(k^T, s)), as MatMul(q, k^T) * fl(s s)
    when the product is no larger than the operands, else as MatMul(q * (s t), k^T) when both are scaled; a
    scaled q also read elsewhere keeps its Mul."""
    rng = np.random.default_rng(rows)
    n = helper.make_node
    s, t = 0.35355339, 0.5
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2])]
    q_in, k_in, outputs = "q", "kt", [vinfo("y", [1, 3, rows, rows])]
    if sides in ("both", "q", "shared"):
        nodes.append(n("Mul", ["q", "s"], ["qs"]))
        q_in = "qs"
    if sides in ("both", "k", "shared"):
        nodes.append(n("Mul", ["t", "kt"], ["ks"]))
        k_in = "ks"
    nodes.append(n("MatMul", [q_in, k_in], ["y"]))
    if sides == "shared":
        outputs.append(vinfo("qs", [1, 3, rows, depth]))
    model = make_model(nodes, [vinfo("q", [1, 3, rows, depth]), vinfo("k", [1, 3, rows, depth])], outputs,
                       [const("s", [s]), const("t", t)])
    q = rng.standard_normal((1, 3, rows, depth)).astype(np.float32)
    k = rng.standard_normal((1, 3, rows, depth)).astype(np.float32)
    got, steps = run(model, {"q": q, "k": k}, monkeypatch, checked)
    ops = [st.node.op_type for st in steps]
    assert ops.count("Mul") == muls
    if muls == 0 and sides == "both":
        # both scalars as one step on the product: the float32 s t
        (mm,) = [st for st in steps if st.node.op_type == "MatMul"]
        assert [e.op for e in epilogue_of(mm.node)] == ["Mul"]
    qs = q * np.float32(s) if sides in ("both", "q", "shared") else q
    kt = k.transpose(0, 1, 3, 2)
    ks = np.float32(t) * kt if sides in ("both", "k", "shared") else kt
    want = qs.astype(np.float64) @ ks
    # the float32 scalings of either order (one rounding each of |q||k| sized terms) and the product's sums
    assert_within_bound(got[0], want, matmul_bound(qs, ks) + 4 * U * (np.abs(qs.astype(np.float64)) @ np.abs(ks)))


@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("shape", [(1, 4, 64, 64), (2, 3, 5, 1000), (7, 1), (6, 5), (1, 2, 13, 13), (5, 150), (7, 9)])
def test_native_softmax_rows_against_float64_with_masks_and_non_finite_rows(monkeypatch, checked, shape):
    """native/nn_softmax.h through the fast Softmax: a causal -inf mask is exactly 0, a row far below the
    others keeps full precision (its own maximum), and rows with NaN, +inf or only -inf come out as the
    reference's (hostkernels/_reduce.softmax)."""
    from nnhal.hostkernels._reduce import softmax
    rng = np.random.default_rng(len(shape))
    x = (rng.standard_normal(shape) * 6).astype(np.float32)
    masked = np.zeros(shape, bool)
    if shape[-1] > 1:
        masked = np.triu(np.ones(shape[-2:], bool), 1) & np.ones(shape, bool) if shape[-2] == shape[-1] else masked
        x[masked] = -np.inf
        flat = x.reshape(-1, shape[-1])
        flat[0] -= 500.0
        flat[1, 3], flat[2, 4], flat[3] = np.nan, np.inf, -np.inf
    model = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [vinfo("x", list(shape))],
                       [vinfo("y", list(shape))])
    with np.errstate(invalid="ignore"):
        (got,), steps = run(model, {"x": x}, monkeypatch, checked)
        want = softmax(x.astype(np.float64), (len(shape) - 1,))
    assert [st.kernel_name for st in steps] == ["fast"]
    ok = ~np.isnan(want)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and (got[masked & ok] == 0).all()
    # exp to a few ulp, the row sum's roundings (width terms), the reciprocal and the product
    bound = (8 + 2 * shape[-1]) * U * np.abs(want[ok])
    assert_within_bound(got[ok], want[ok], bound)
