"""The exact Gelu after DynamicQuantizeGemm fused into the integer GEMM (qkernels.c gemm_dynamic's ``gelu``,
integer.fuse_dynamic_gelu): the kernel's outputs against the product followed by the cpu device's Gelu kernel, on
every integer instruction set this CPU has (rows of every quantization, split / narrow / 7-bit weights, odd
shapes, two threads); in a graph the Gelu step is gone and the outputs equal the plan without the fusion."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from nnhal.device.cpu import native, qnative
from nnhal.device.cpu.kernels.gelu import GeluNative
from tests.device.cpu.integer_plans import assert_left_alone, model_of, run_without
from tests.device.cpu.isa_rerun import rerun_under_isa

pytestmark = pytest.mark.skipif(not qnative.status().available,
                                reason=f"integer kernels not loaded: {qnative.status().reason}")

EPS = float(np.finfo(np.float32).eps)


def _gelu(y: np.ndarray) -> np.ndarray:
    out = np.empty_like(y)
    return GeluNative().into(np.ascontiguousarray(y), out)


def _close(got: np.ndarray, want: np.ndarray, pre: np.ndarray) -> None:
    """Equal on the SIMD instruction sets (the fused Gelu runs the native Gelu's fused multiply-adds); elsewhere the
    polynomials' 11 steps may round apart (each a unit of the step): 16 units of |pre| + |want| bound the
    difference, |pre| covering the cancellation in 1 + erf for large negative values."""
    if qnative.kernels().isa() != "portable" and native.available():
        np.testing.assert_array_equal(got, want)
        return
    bound = 16 * EPS * (np.abs(pre) + np.abs(want)) + 1e-30
    with np.errstate(invalid="ignore"):                                   # inf - inf where both are inf
        diff = np.abs(got.astype(np.float64) - want)
    ok = (got == want) | (diff <= bound)
    assert np.all(ok), (got[~ok], want[~ok])


@pytest.mark.parametrize("m,k,n", [(29, 45, 37), (7, 384, 200), (70, 130, 1536)])
@pytest.mark.parametrize("signed", [0, 1])
@pytest.mark.parametrize("weights", ["split", "narrow", "a7"])
@pytest.mark.parametrize("threads", [1, 2])
def test_gelu_equals_the_gelu_after_the_product(m, k, n, signed, weights, threads):
    q = qnative.kernels()
    rng = np.random.default_rng(m + k + n + signed)
    x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 4, k)).astype(np.float32)
    x[3] = 0.0                                                            # an all-zero row (scale 1)
    w = rng.integers(-127, 128, (n, k), dtype=np.int8)
    if weights == "narrow":
        w = np.clip(w, -64, 64).astype(np.int8)
    packed = q.pack_b(w, k, n, None, 1, int(weights == "a7"))
    scale = rng.uniform(0.001, 0.004, n).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    kscale = rng.uniform(0.5, 2, k).astype(np.float32) if signed else None
    plain, got = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
    q.gemm_dynamic(x, signed, packed, plain, bias, scale, -np.inf, np.inf, threads, kscale)
    q.gemm_dynamic(x, signed, packed, got, bias, scale, -np.inf, np.inf, threads, kscale, 1)
    assert np.min(plain) < -3 and np.max(plain) > 3                       # both tails of the Gelu reached
    _close(got, _gelu(plain), plain)
    q.gemm_dynamic(x, signed, packed, got, bias, scale, -np.inf, np.inf, threads, kscale, 0)
    np.testing.assert_array_equal(got, plain)


def test_gelu_of_special_values():
    """NaN stays NaN, +-inf give inf / NaN as the Gelu node's kernel (x (1 + erf(x / sqrt 2)) / 2 with erf on the
    clamped argument: -inf * 0 is NaN), signed zeros and the clamp at |x / sqrt 2| = 4 as it."""
    q = qnative.kernels()
    k, n = 8, 11
    w = np.zeros((n, k), np.int8)
    w[:, 0] = 1
    packed = q.pack_b(w, k, n, None, 1)
    bias = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 5.657, -5.657, 6.0, -6.0, 1e-30, -1e-30], np.float32)
    x = np.zeros((3, k), np.float32)
    plain, got = np.empty((3, n), np.float32), np.empty((3, n), np.float32)
    q.gemm_dynamic(x, 0, packed, plain, bias, np.ones(n, np.float32), -np.inf, np.inf, 1)
    q.gemm_dynamic(x, 0, packed, got, bias, np.ones(n, np.float32), -np.inf, np.inf, 1, None, 1)
    want = _gelu(plain)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    _close(got[finite], want[finite], plain[finite])


def test_gelu_argument_is_checked():
    q = qnative.kernels()
    k, n = 16, 8
    packed = q.pack_b(np.ones((n, k), np.int8), k, n, None, 1)
    x, out, scale = np.ones((3, k), np.float32), np.empty((3, n), np.float32), np.ones(n, np.float32)
    args = (x, 0, packed, out, None, scale, -np.inf, np.inf, 1, None)
    with pytest.raises(ValueError, match="gelu"):
        q.gemm_dynamic(*args, 2)
    with pytest.raises(TypeError, match="gelu"):
        q.gemm_dynamic(*args, None)
    with pytest.raises(TypeError, match="arguments"):
        q.gemm_dynamic(*args, 1, 1)


def _gelu_model(k=48, n=40, float_column=False, product_is_output=False, reshape=True, gelu=True):
    """x [2, 5, k] -> Reshape [10, k] -> DynamicQuantizeGemm -> (Reshape [2, 5, n]) -> Gelu -> y; float column 3
    when ``float_column``; the product also a graph output when ``product_is_output``; without the Gelu (y the
    product) unless ``gelu``."""
    rng = np.random.default_rng(11)
    inits = {"shape2d": np.array([-1, k], np.int64), "shape3d": np.array([2, 5, n], np.int64),
             "w": rng.integers(-127, 128, (n, k), dtype=np.int8), "ws": rng.uniform(0.002, 0.004, n).astype(np.float32),
             "b": rng.standard_normal(n).astype(np.float32)}
    gemm_in, attrs = ["x2d", "w", "ws", "b"], {"activation": "uint8", "block": 0}
    if float_column:
        inits["wf"] = rng.standard_normal((1, k)).astype(np.float32)
        gemm_in.append("wf")
        attrs["float_columns"] = [3]
    nodes = [helper.make_node("Reshape", ["x", "shape2d"], ["x2d"]),
             helper.make_node("DynamicQuantizeGemm", gemm_in, ["p2d"], domain="ai.nnhal", **attrs)]
    if reshape:
        nodes.append(helper.make_node("Reshape", ["p2d", "shape3d"], ["p"]))
    last = "p" if reshape else "p2d"
    nodes.append(helper.make_node("Gelu", [last], ["y"]) if gelu else helper.make_node("Identity", [last], ["y"]))
    outputs = ["y", "p2d"] if product_is_output else ["y"]
    return model_of(nodes, inits, outputs, k, 20, rng)


def _run(model, x, fused: bool, monkeypatch):
    return run_without(model, x, monkeypatch, None if fused else "fuse_dynamic_gelu")


@pytest.mark.parametrize("float_column", [False, True])
@pytest.mark.parametrize("reshape", [True, False])
def test_the_gelu_folds_into_the_product_and_the_outputs_stay(float_column, reshape, monkeypatch):
    model, x = _gelu_model(float_column=float_column, reshape=reshape)
    got, steps = _run(model, x, True, monkeypatch)
    want, plain_steps = _run(model, x, False, monkeypatch)
    assert "Gelu" in [st.node.op_type for st in plain_steps]
    assert "Gelu" not in [st.node.op_type for st in steps]
    names = [st.kernel_name for st in steps if st.node.op_type == "DynamicQuantizeGemm"]
    assert len(names) == 1 and names[0].endswith("+gelu"), names
    assert got[0].shape == want[0].shape
    # the float column takes the Gelu node's own kernel after its float product: the same values
    pre, _ = _run(_gelu_model(float_column=float_column, reshape=reshape, gelu=False)[0], x, True, monkeypatch)
    _close(got[0], want[0], pre[0])
    assert np.min(want[0]) < -0.1 and np.max(want[0]) > 3


def test_a_product_read_elsewhere_keeps_its_gelu(monkeypatch):
    model, x = _gelu_model(product_is_output=True)
    assert_left_alone(model, x, monkeypatch, "fuse_dynamic_gelu", "Gelu", "+gelu")


@pytest.mark.parametrize("isa", ["portable", "avx2", "avxvnni", "avx512vnni"])
def test_isa_path(isa):
    """This file's tests again with NNHAL_QGEMM_ISA=isa, in a fresh process."""
    if not native.available():
        pytest.skip(f"native kernels not loaded: {native.status().reason}")
    rerun_under_isa(__file__, isa, qnative.kernels().available(), "not isa_path")
