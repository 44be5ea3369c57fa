"""onnxruntime's dynamic quantization chains (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul [-> Add],
what quantize_dynamic writes) become one com.microsoft MatMulIntegerToFloat (optimizer/qchains.py) on the cpu
device's integer GEMM (integer.py), bit-equal to the unfused graph as onnx.reference runs it, on both plan
paths; chains the fusion must not take stay correct."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.device.cpu import native, qnative
from nnhal.hostkernels.op_dynamic_quantize_linear import DynamicQuantizeLinearKernel

pytestmark = pytest.mark.skipif(not qnative.status().available or not native.available(),
                                reason=f"integer kernels: {qnative.status().reason}; native: {native.status().reason}")

K, N = 48, 20


def _chain_model(rng, bias=True, shared_cast=False, computed_w_scale=False, b_dtype=np.int8):
    """x [2, 5, K] -> DynamicQuantizeLinear -> MatMulInteger(W) -> Cast -> Mul(xs * w_scale) [-> Add(bias)]."""
    low = np.iinfo(b_dtype).min
    inits = {"w": rng.integers(low, np.iinfo(b_dtype).max + 1, (K, N), dtype=b_dtype),
             "w_zero": rng.integers(0 if low == 0 else -4, 5, N).astype(b_dtype),
             "w_scale": rng.uniform(0.001, 0.01, N).astype(np.float32),
             "bias": rng.standard_normal(N).astype(np.float32)}
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"])]
    w_scale = "w_scale"
    if computed_w_scale:
        nodes.append(helper.make_node("Identity", ["x_scale_source"], ["w_scale_live"]))
        w_scale = "w_scale_live"
    nodes += [helper.make_node("Mul", ["xs", w_scale], ["s"]),
              helper.make_node("MatMulInteger", ["xq", "w", "xz", "w_zero"], ["acc"]),
              helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
              helper.make_node("Mul", ["accf", "s"], ["prod"])]
    outputs = ["y"]
    nodes.append(helper.make_node("Add", ["prod", "bias"], ["y"]) if bias else
                 helper.make_node("Identity", ["prod"], ["y"]))
    if shared_cast:
        nodes.append(helper.make_node("ReduceSum", ["accf"], ["total"], keepdims=0))
        outputs.append("total")
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, K])]
    if computed_w_scale:
        inputs.append(helper.make_tensor_value_info("x_scale_source", TensorProto.FLOAT, [N]))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                                                   for o in outputs],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9), inits


def _kernels(session):
    return {(st.node.op_type, st.kernel_name) for sg in session.graph.execution.subgraphs
            for st in sg.device_graph.steps}


def _run(model, feeds, check, monkeypatch):
    monkeypatch.setenv("NNHAL_CHECK", check)
    with nnhal.Session(model, devices=["cpu"]) as session:
        return session.run(feeds), _kernels(session)


@pytest.mark.parametrize("check", ["0", "1"])
@pytest.mark.parametrize("bias,b_dtype", [(True, np.int8), (False, np.int8), (True, np.uint8)])
def test_a_dynamic_quantization_chain_is_one_integer_gemm_bit_equal_to_the_chain(bias, b_dtype, check, monkeypatch):
    rng = np.random.default_rng(5)
    model, _ = _chain_model(rng, bias=bias, b_dtype=b_dtype)
    feeds = {"x": rng.standard_normal((2, 5, K)).astype(np.float32) * 3}
    got, kernels = _run(model, feeds, check, monkeypatch)
    assert ("MatMulIntegerToFloat", "int8 gemm") in kernels
    assert not {op for op, _ in kernels} & {"MatMulInteger", "Cast", "Add"}
    assert ("DynamicQuantizeLinear", "native") in kernels
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_array_equal(got[0], want)


@pytest.mark.parametrize("case", ["the cast read twice", "a computed weight scale"])
def test_chains_the_fusion_must_not_take_stay_unfused_and_correct(case, monkeypatch):
    rng = np.random.default_rng(6)
    model, inits = _chain_model(rng, shared_cast=case == "the cast read twice",
                                computed_w_scale=case == "a computed weight scale")
    feeds = {"x": rng.standard_normal((2, 5, K)).astype(np.float32)}
    if case == "a computed weight scale":
        feeds["x_scale_source"] = inits["w_scale"]
    got, kernels = _run(model, feeds, "0", monkeypatch)
    assert "MatMulIntegerToFloat" not in {op for op, _ in kernels}
    want = ReferenceEvaluator(model).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("values", ["random", "all zero", "positive only", "with a NaN"])
def test_native_dynamic_quantize_linear_equals_the_numpy_kernel(values):
    from nnhal.device.cpu.kernels.qdq import DynamicQuantizeLinearNative

    rng = np.random.default_rng(7)
    x = {"random": rng.standard_normal((3, 77)) * 5, "all zero": np.zeros((3, 77)),
         "positive only": rng.uniform(0.5, 2.0, (3, 77)), "with a NaN": np.full((3, 77), np.nan)}[values]
    x = x.astype(np.float32)

    class _Node:
        attrs: dict = {}

    with np.errstate(invalid="ignore"):
        got = DynamicQuantizeLinearNative().compute(_Node(), x)
        want = DynamicQuantizeLinearKernel().compute(_Node(), x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def _qdq_matmul_model(rng, axis=1):
    """x uint8 -> DQ -> MatMul(DQ(int8 W, scales along ``axis``)) -> Softmax (a float output, no QuantizeLinear)."""
    w = rng.integers(-127, 128, (K, N), dtype=np.int8)
    size = N if axis == 1 else K
    inits = {"sx": np.array(0.02, np.float32), "zx": np.array(117, np.uint8), "w": w,
             "sw": rng.uniform(0.001, 0.01, size).astype(np.float32), "zw": np.zeros(size, np.int8)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wf"], axis=axis),
             helper.make_node("MatMul", ["xf", "wf"], ["m"]),
             helper.make_node("Softmax", ["m"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [3, 7, K])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("m", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9), inits


@pytest.mark.parametrize("check", ["0", "1"])
@pytest.mark.parametrize("axis", [1, 0])
def test_a_qdq_matmul_with_a_float_output_is_an_integer_gemm(axis, check, monkeypatch):
    """Per-column weight scales: MatMulIntegerToFloat on the integer GEMM, the exact integer sum times the two
    scales (within float32 rounding of the definition in float64); per-row scales (axis 0) are not a
    per-column product: the float path, as correct."""
    rng = np.random.default_rng(8)
    model, inits = _qdq_matmul_model(rng, axis)
    x = rng.integers(0, 256, (3, 7, K), dtype=np.uint8)
    (y, m), kernels = _run(model, {"x": x}, check, monkeypatch)
    fused = ("MatMulIntegerToFloat", "int8 gemm") in kernels
    assert fused == (axis == 1), kernels
    w = inits["w"].astype(np.float64) * (inits["sw"][None, :] if axis == 1 else inits["sw"][:, None])
    want = ((x.astype(np.float64) - 117) * np.float64(np.float32(0.02))) @ w
    # float32 rounding of each product term and of the sum: a few ulps of the largest partial sums
    bound = 8 * np.finfo(np.float32).eps * (np.abs((x.astype(np.float64) - 117) * 0.02) @ np.abs(w)) + 1e-7
    assert np.all(np.abs(m - want) <= bound)
    e = np.exp(m - m.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-7)
