"""The CPU's transformer kernels (MatMul with its epilogue and Gelu, Softmax, LayerNormalization) against
onnxruntime: batch > 1, odd shapes, and strided operands given straight to the kernels."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.conformance.tolerance import assert_within_bound, matmul_bound
from nnhal.device.cpu.kernels import matmul as op_matmul
from nnhal.device.cpu.kernels.matmul import matmul
from nnhal.hostkernels._reduce import softmax
from nnhal.hostkernels.fused import epilogue_of
from tests.conftest import make_model, vinfo

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")


def run_both(model, feeds):
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = s.run(feeds)
        steps = s.subgraphs[0].device_graph.steps
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    return got, want, steps


def const(name, value):
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def gelu_chain(x, y, tag):
    """torch.onnx's exact Gelu: Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)."""
    return [helper.make_node("Div", [x, "sqrt2"], [f"{tag}d"]), helper.make_node("Erf", [f"{tag}d"], [f"{tag}e"]),
            helper.make_node("Add", [f"{tag}e", "one"], [f"{tag}a"]),
            helper.make_node("Mul", [x, f"{tag}a"], [f"{tag}m"]),
            helper.make_node("Mul", [f"{tag}m", "half"], [y])]


@pytest.mark.parametrize("shape", [(1, 3, 5, 7), (2, 29, 5, 7)])
def test_a_strided_stacked_a_is_one_product_equal_to_numpys(shape):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape, np.float32).transpose(0, 2, 3, 1)     # channels last, not contiguous
    b = rng.standard_normal((shape[1], 11), np.float32)
    want = np.matmul(a.astype(np.float64), b).astype(np.float32)
    bound = matmul_bound(a, b)         # the kernel's float32 sums in its BLAS's order, against float64 rounded
    assert_within_bound(matmul(a, b, None), want, bound)
    out = np.empty(want.shape[:-1] + (11,), np.float32)
    assert matmul(a, b, out) is out
    assert_within_bound(out, want, bound)
    strided = np.empty(want.shape[::-1], np.float32).T                  # a strided output buffer
    assert matmul(a, b, strided) is strided
    assert_within_bound(strided, want, bound)


@pytest.mark.parametrize("batch,rows,k,n,block", [(1, 197, 64, 256, None), (3, 37, 29, 61, None),
                                                   (2, 1500, 16, 48, None), (2, 5, 8, 61, 50), (1, 9, 8, 20, 64)])
def test_matmul_bias_gelu_fuses_into_one_step_and_matches_onnxruntime(monkeypatch, batch, rows, k, n, block):
    if block is not None:   # Gelu blocks of one row (block < n) and of 3 rows with a partial last one
        monkeypatch.setattr(op_matmul, "BLOCK", block)
    rng = np.random.default_rng(rows)
    inits = [const("w", rng.standard_normal((k, n)) / np.sqrt(k)), const("bias", rng.standard_normal(n)),
             const("sqrt2", 1.4142135381698608), const("one", 1.0), const("half", 0.5)]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "bias"], ["h"]),
             *gelu_chain("h", "y", "g")]
    model = make_model(nodes, [vinfo("x", [batch, rows, k])], [vinfo("y", [batch, rows, n])], inits)
    feeds = {"x": rng.standard_normal((batch, rows, k)).astype(np.float32) * 2}
    (got,), (want,), steps = run_both(model, feeds)
    (step,) = steps          # MatMul + Add + the five Gelu nodes: one fused step
    assert [e.op for e in epilogue_of(step.node)] == ["Add", "Gelu"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(1, 12, 197, 197), (2, 3, 7, 13), (5, 1000)])
def test_softmax_of_attention_scores_matches_onnxruntime(shape):
    rng = np.random.default_rng(len(shape))
    x = (rng.standard_normal(shape) * 8).astype(np.float32)
    x[..., 0, :] -= 200.0            # rows far below the band's maximum take their own maximum
    x[..., -1, ::3] = -np.inf        # a causal-style mask
    model = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [vinfo("x", list(shape))],
                       [vinfo("y", list(shape))])
    (got,), (want,), steps = run_both(model, {"x": x})
    assert [st.kernel_name for st in steps] == ["fast"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=1e-5)


def test_softmax_bands_with_infinities_match_the_reference_kernel():
    x = np.random.default_rng(4).standard_normal((3, 5, 6000)).astype(np.float32)   # bands of 21 rows
    x[0, 1, 7] = np.inf
    x[1, 2, :] = -np.inf
    x[2, 3, 9] = np.nan
    model = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [vinfo("x", [3, 5, 6000])],
                       [vinfo("y", [3, 5, 6000])])
    with nnhal.Session(model, devices=["cpu"]) as s, np.errstate(invalid="ignore"):
        (got,) = s.run({"x": x})       # a row with +inf or NaN is NaN somewhere, as the reference makes it
        want = softmax(x, (2,))        # the reference kernel's function
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-8, equal_nan=True)
    assert np.isfinite(got[0, 0]).all() and np.isnan(got[1, 2]).all()


def test_softmax_after_a_scaled_product_runs_in_place_and_matches_onnxruntime():
    rng = np.random.default_rng(3)
    inits = [const("k", rng.standard_normal((2, 16, 300))), const("scale", 8.0)]
    nodes = [helper.make_node("MatMul", ["q", "k"], ["s"]), helper.make_node("Div", ["s", "scale"], ["d"]),
             helper.make_node("Softmax", ["d"], ["y"], axis=-1)]
    model = make_model(nodes, [vinfo("q", [1, 2, 300, 16])], [vinfo("y", [1, 2, 300, 300])], inits)
    (got,), (want,), _ = run_both(model, {"q": rng.standard_normal((1, 2, 300, 16)).astype(np.float32) * 3})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("shape,perm", [((2, 7, 33), None), ((1, 96, 5, 9), (0, 2, 3, 1))])
def test_layer_normalization_matches_onnxruntime_also_after_a_transpose(shape, perm):
    rng = np.random.default_rng(1)
    width = shape[-1] if perm is None else shape[perm[-1]]
    inits = [const("scale", rng.standard_normal(width)), const("bias", rng.standard_normal(width))]
    nodes, src = [], "x"
    if perm is not None:
        nodes.append(helper.make_node("Transpose", ["x"], ["t"], perm=list(perm)))
        src = "t"
    out_shape = list(shape) if perm is None else [shape[p] for p in perm]
    nodes.append(helper.make_node("LayerNormalization", [src, "scale", "bias"], ["y"], axis=-1, epsilon=1e-6))
    model = make_model(nodes, [vinfo("x", list(shape))], [vinfo("y", out_shape)], inits)
    x = (rng.standard_normal(shape) * 3 + 5).astype(np.float32)
    (got,), (want,), _ = run_both(model, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_layer_normalization_output_keeps_its_input_dtype():
    model = make_model([helper.make_node("LayerNormalization", ["x", "s"], ["y"], axis=-1)],
                       [vinfo("x", [3, 8], TensorProto.FLOAT)], [vinfo("y", [3, 8], TensorProto.FLOAT)],
                       [const("s", np.ones(8))])
    (got,), (want,), _ = run_both(model, {"x": np.arange(24, dtype=np.float32).reshape(3, 8)})
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
