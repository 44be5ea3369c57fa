"""The cpu device's native (C) kernels against numpy: each native path and the numpy path it replaces give the
same results, and the numpy paths stay covered with the native kernels switched off.

CI sets NNHAL_REQUIRE_NATIVE=1 (.ci/run): there the library must have been built and loaded."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from nnhal.device.cpu import native
from nnhal.device.cpu.kernels import _gates, gelu
from nnhal.hostkernels.fused import Activation
from tests.device.cpu import test_nhwc_conv as nhwc

needs_native = pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.status().reason}")

DEPTHWISE = [name for name, case in nhwc.CASES.items() if case[1] == case[9]]     # C == group
# wider channel counts than nhwc.CASES: full 32-channel blocks, a tail, strides, dilation, batch 2
# NOTE: added to the shared CASES table so that nhwc.make and nhwc.check take them by name; the
# device tests collected before this module keep their own parametrization
nhwc.CASES.update({
    "dw-c40-s2": (2, 40, 13, 12, 40, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 40, "nhwc-gemm"),
    "dw-c96-7x7": (1, 96, 14, 14, 96, (7, 7), (1, 1), (3, 3, 3, 3), (1, 1), 96, "nhwc-gemm"),
    "dw-c64-5x5-dil2-asym": (1, 64, 12, 11, 64, (5, 5), (1, 2), (4, 3, 2, 4), (2, 2), 64, "nhwc-gemm"),
    "dw-c240-5x5": (1, 240, 14, 14, 240, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 240, "nhwc-gemm"),
})
WIDE = ["dw-c40-s2", "dw-c96-7x7", "dw-c64-5x5-dil2-asym", "dw-c240-5x5"]
ACTS = {**nhwc.ACTIVATIONS, "hardsigmoid": Activation("hardsigmoid", alpha=0.25, beta=0.4),
        "sigmoid": Activation("sigmoid")}


def _reference_activation(y: np.ndarray, act: Activation) -> np.ndarray:
    y64 = y.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        sig = 1 / (1 + np.exp(-y64))
        return {"hardsigmoid": lambda: np.clip(act.alpha * y64 + act.beta, 0, 1), "sigmoid": lambda: sig,
                "silu": lambda: y64 * sig, "hardswish": lambda: y64 * np.clip(y64 / 6 + 0.5, 0, 1)}[act.kind]()


def test_native_built_where_required():
    if os.environ.get("NNHAL_REQUIRE_NATIVE") != "1":
        pytest.skip("NNHAL_REQUIRE_NATIVE is not 1 (only CI requires the native kernels to be built)")
    assert native.available(), native.status().reason
    # the BLAS is the one linked at build time (scipy-openblas32), and the native pool is what runs the GEMMs
    blas = native.blas_info()
    assert "scipy-openblas32" in blas["library"] and "OpenBLAS" in blas["config"], blas
    from nnhal.device.cpu import parallel

    # asked in a fresh thread: a run earlier in this process may have switched its own thread's pool off
    seen: list[bool] = []
    fresh = threading.Thread(target=lambda: seen.append(parallel.native_pool()))
    fresh.start()
    fresh.join()
    assert seen == [True] or os.environ.get("NNHAL_CPU_POOL") == "0"


@needs_native
@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("name", DEPTHWISE + WIDE)
def test_native_depthwise_matches_reference(monkeypatch, name, act):
    """The native depthwise kernel (selected whenever it is built) with bias and every activation kind."""
    if act in ("hardsigmoid", "sigmoid"):
        monkeypatch.setattr(nhwc, "reference", _with_gates(nhwc.reference))
    nhwc.check(name, True, ACTS[act])


@pytest.mark.parametrize("act", ["none", "relu", "silu"])
@pytest.mark.parametrize("name", DEPTHWISE + WIDE)
def test_numpy_depthwise_without_native(monkeypatch, name, act):
    """With the native kernels off (as on a machine without a C compiler) numpy computes the same."""
    monkeypatch.setattr(native, "available", lambda: False)
    nhwc.check(name, True, ACTS[act])


@needs_native
def test_native_depthwise_shared_by_threads():
    """One prepared kernel run from four Python threads at once (ctypes releases the GIL during the call):
    every result equals the single-thread one, since the kernel keeps no state between calls."""
    from concurrent.futures import ThreadPoolExecutor

    node, ins, outs, x, wv, bv = nhwc.make("dw-c240-5x5", True, ACTS["silu"])
    run = nhwc.select(node, ins, outs, layout="NHWC").prepare(node, ins, outs)
    xs = [np.ascontiguousarray((x * (k + 1)).transpose(0, 2, 3, 1)) for k in range(8)]
    alone = [run([xk, wv, bv], [None])[0] for xk in xs]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda xk: run([xk, wv, bv], [None])[0], xs * 4))
    for k, got in enumerate(together):      # bit equality: the same kernel, same inputs, same order of sums
        np.testing.assert_array_equal(got, alone[k % 8])


def _with_gates(reference):
    def ref(node, ins, outs, x, wv, bv):
        act = nhwc.activation_of(node)
        plain = nhwc.FusedNode(**{f: getattr(node, f) for f in vars(node) if f != "activation"}, activation=None)
        return _reference_activation(reference(plain, ins, outs, x, wv, bv), act).astype(x.dtype)
    return ref


EXTREMES = np.array([0.0, -0.0, 1e-30, -1e-30, 3.0, -3.0, 2.5, -2.5, 6.0, -6.0, 40.0, -40.0, 87.0, -87.0,
                     88.5, -88.5, 100.0, -100.0, 1e30, -1e30, np.inf, -np.inf, np.nan], np.float32)
GATES = {"sigmoid": _gates.sigmoid_, "silu": _gates.silu_, "hardswish": _gates.hardswish_,
         "hardsigmoid": lambda y: _gates.hardsigmoid_(y, 0.2, 0.5), "gelu": gelu.gelu_inplace}


@needs_native
@pytest.mark.parametrize("kind", list(GATES))
@pytest.mark.parametrize("size", [1, 7, 16384, 70001], ids=lambda s: f"n{s}")
def test_native_gates_match_numpy(monkeypatch, kind, size):
    """The in-place gates on float32, native against numpy: within 4 float32 ulps of the value's scale
    on ordinary values; the same NaN and the same infinities on extreme ones."""
    rng = np.random.default_rng(size)
    x = (rng.standard_normal(size) * 8).astype(np.float32)
    x[:min(size, EXTREMES.size)] = EXTREMES[:min(size, EXTREMES.size)]
    got = x.copy()
    GATES[kind](got)
    monkeypatch.setattr(native, "available", lambda: False)
    want = x.copy()
    with np.errstate(invalid="ignore"):
        GATES[kind](want)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    scale = np.maximum(np.abs(want[finite]), 1.0)
    # NOTE: Gelu's 1 + erf(x / sqrt 2) cancels in the negative tail; the two paths round the rational erf
    # differently (fused multiply-adds) there, each within the approximation's own 1.4e-6 absolute error
    slack = 2e-6 if kind == "gelu" else 0.0
    assert np.all(np.abs(got[finite] - want[finite]) <= 4 * np.finfo(np.float32).eps * scale + slack)


@needs_native
def test_native_gates_leave_float64_and_strided_to_numpy():
    y = np.linspace(-5, 5, 101)
    want = 1 / (1 + np.exp(-y))
    _gates.sigmoid_(y)
    np.testing.assert_allclose(y, want, rtol=1e-15)
    z = np.linspace(-5, 5, 202).astype(np.float32)
    view = z[::2]
    expect = (view.astype(np.float64) / (1 + np.exp(-view.astype(np.float64)))).astype(np.float32)
    _gates.silu_(view)
    np.testing.assert_allclose(view, expect, rtol=1e-6, atol=1e-7)
    assert np.all(z[1::2] == np.linspace(-5, 5, 202).astype(np.float32)[1::2])


def _numpy_fake_quantize(x: np.ndarray, block: int, signed: bool) -> np.ndarray:
    """hostkernels/nn_dynamic_quantize_gemm.py's numpy steps for per-block activation quantization."""
    m, k = x.shape
    rows = x.reshape(m, k // block, block)
    if signed:
        peak = np.abs(rows).max(axis=2, keepdims=True)
        scale = np.where(peak > 0, peak / 127.0, np.float32(1.0)).astype(np.float32)
        xq = np.clip(np.rint(rows / scale), -127.0, 127.0)
    else:
        lo = np.minimum(rows.min(axis=2, keepdims=True), 0)
        hi = np.maximum(rows.max(axis=2, keepdims=True), 0)
        scale = np.where(hi > lo, (hi - lo) / 255.0, np.float32(1.0)).astype(np.float32)
        zero = np.rint(-lo / scale)
        xq = np.clip(np.rint(rows / scale) + zero, 0, 255) - zero
    xq *= scale
    return xq.reshape(m, k)


@needs_native
@pytest.mark.parametrize("signed", [True, False], ids=["int8", "uint8"])
@pytest.mark.parametrize("block", [16, 32])
def test_native_fake_quantize_blocks_is_numpy_bit_for_bit(signed, block):
    """Outlier channels, an all-zero block, an all-positive and an all-negative row: the same bits."""
    rng = np.random.default_rng(block + signed)
    x = (rng.standard_normal((37, 8 * block)) * rng.standard_normal((1, 8 * block)) * 4).astype(np.float32)
    x[:, 5] *= 60                              # an outlier channel
    x[3, :block] = 0                           # a block of zeros (scale 1)
    x[4] = np.abs(x[4])
    x[5] = -np.abs(x[5])
    got = np.empty_like(x)
    native.fake_quantize_blocks(x, got, block, signed)
    np.testing.assert_array_equal(got, _numpy_fake_quantize(x, block, signed))


@pytest.mark.parametrize("built", [True, False], ids=["native", "without-native"])
@pytest.mark.parametrize("activation", ["int8", "uint8"])
def test_dynamic_gemm_blocks_on_the_cpu_device(monkeypatch, activation, built):
    """The cpu device's DynamicQuantizeGemm kernel (native block quantization and GEMM, or its numpy path
    when the native kernels are off) passes the checks the host kernel passes (tests/optimizer)."""
    from nnhal.device.cpu.kernels.quantized import DynamicQuantizeGemmNative
    from nnhal.hostkernels import nn_dynamic_quantize_gemm
    from tests.optimizer.test_outliers import test_dynamic_gemm_in_blocks_scales_each_block_and_beats_whole_rows

    if built and not native.available():
        pytest.skip(f"native kernels: {native.status().reason}")
    monkeypatch.setattr(nn_dynamic_quantize_gemm, "DynamicQuantizeGemmKernel", DynamicQuantizeGemmNative)
    if not built:
        monkeypatch.setattr(native, "available", lambda: False)
    test_dynamic_gemm_in_blocks_scales_each_block_and_beats_whole_rows(activation)


@needs_native
def test_matmul_with_constant_weights_runs_a_prepared_gemm(monkeypatch):
    """MatMul + bias + Relu with a constant B: the GEMM is prepared once (native.Gemm holds B and the bias)
    and every run goes through it, with the result of numpy's product."""
    from onnx import TensorProto, helper, numpy_helper

    import nnhal

    monkeypatch.setenv("NNHAL_CPU_POOL", "1")
    runs = []
    real = native.Gemm

    class Recording:
        def __init__(self, *args):
            self.gemm = real(*args)

        def run(self, *args):
            runs.append(args[2])
            return self.gemm.run(*args)

    monkeypatch.setattr(native, "Gemm", Recording)
    rng = np.random.default_rng(3)
    w = rng.standard_normal((64, 96)).astype(np.float32)
    bias = rng.standard_normal(96).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["u"]),
             helper.make_node("Relu", ["u"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((256, 64)).astype(np.float32)
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = [s.run({"x": x})[0] for _ in range(2)]
    assert len(runs) >= 2, "the prepared GEMM did not run"
    want = np.maximum(x.astype(np.float64) @ w + bias, 0)
    # float32 sums of K + 1 terms in any order: at most (K + 1) roundings of the sum of magnitudes
    bound = (w.shape[0] + 1) * 2.0 ** -24 * (np.abs(x).astype(np.float64) @ np.abs(w) + np.abs(bias))
    for y in got:
        assert np.all(np.abs(y - want) <= bound + 2.0 ** -126)
