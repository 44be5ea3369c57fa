"""Quantized ONNX nodes reach the cpu device's integer kernels (device/cpu/integer.py) and give ONNX's
exact results: MatMulInteger, QLinearMatMul and QLinearConv against onnx.reference bit for bit, and
nnhal's DynamicQuantizeGemm (whole-row scales) against its numpy kernel within its float32 rounding."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.device.cpu import qnative
from tests.device.cpu.test_qkernels import _dynamic_ref
from tests.device.cpu.test_qkernels_a7 import a7_reference

pytestmark = pytest.mark.skipif(not qnative.status().available,
                                reason=f"integer kernels not loaded: {qnative.status().reason}")

TYPES = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8, np.float32: TensorProto.FLOAT,
         np.int32: TensorProto.INT32}


def _model(nodes, inits, x_shape, x_dtype, y_dtype, opset=19, domains=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TYPES[x_dtype], x_shape)],
                              [helper.make_tensor_value_info("y", TYPES[y_dtype], None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=opsets, ir_version=9)


def _steps(session):
    return [st for sg in session.graph.execution.subgraphs for st in sg.device_graph.steps]


def _check(model, x, op, monkeypatch=None):
    """The integer kernel ran and equals onnx.reference; a QLinearConv (rescaled in float32, as onnxruntime
    and nnhal's numpy kernel do) equals the numpy kernel and is within one step of onnx.reference."""
    session = nnhal.Session(model, devices=["cpu"])
    (got,) = session.run({"x": x})
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert [st.kernel_name for st in _steps(session) if st.node.op_type == op] in (["int8 gemm"], ["int8 conv"])
    if monkeypatch is None:
        np.testing.assert_array_equal(got, want)
        return
    assert np.abs(got.astype(np.int32) - want).max() <= 1
    monkeypatch.setenv("NNHAL_CPU_REFERENCE", "1")
    (numpy_kernel,) = nnhal.Session(model, devices=["cpu"]).run({"x": x})
    np.testing.assert_array_equal(got, numpy_kernel)


@pytest.mark.parametrize("adt,bdt", [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)])
def test_matmul_integer_runs_the_integer_gemm(adt, bdt):
    rng = np.random.default_rng(1)
    a = rng.integers(np.iinfo(adt).min, np.iinfo(adt).max + 1, (2, 7, 37), dtype=adt)
    b = rng.integers(np.iinfo(bdt).min, np.iinfo(bdt).max + 1, (37, 19), dtype=bdt)
    inits = {"b": b, "za": np.array(rng.integers(0, 100), adt),
             "zb": rng.integers(0, 100, 19).astype(bdt)}
    node = helper.make_node("MatMulInteger", ["x", "b", "za", "zb"], ["y"])
    _check(_model([node], inits, a.shape, adt, np.int32), a, "MatMulInteger")


@pytest.mark.parametrize("adt", [np.uint8, np.int8])
def test_qlinear_matmul_equals_onnx_reference(adt):
    rng = np.random.default_rng(2)
    a = rng.integers(np.iinfo(adt).min, np.iinfo(adt).max + 1, (3, 5, 64), dtype=adt)
    b = rng.integers(-127, 128, (64, 33), dtype=np.int8)
    inits = {"sa": np.array(0.02, np.float32), "za": np.array(3, adt), "b": b,
             "sb": rng.uniform(0.001, 0.01, 33).astype(np.float32), "zb": np.zeros(33, np.int8),
             "sy": np.array(0.05, np.float32), "zy": np.array(7, adt)}
    node = helper.make_node("QLinearMatMul", ["x", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])
    _check(_model([node], inits, a.shape, adt, adt, opset=21), a, "QLinearMatMul")


@pytest.mark.parametrize("group", [1, 16])
@pytest.mark.parametrize("xdt", [np.uint8, np.int8])
def test_qlinear_conv_equals_the_numpy_kernel(group, xdt, monkeypatch):
    rng = np.random.default_rng(3 + group)
    x = rng.integers(np.iinfo(xdt).min, np.iinfo(xdt).max + 1, (2, 16, 11, 9), dtype=xdt)
    m = 24 if group == 1 else 16
    w = rng.integers(-127, 128, (m, 16 // group, 3, 3), dtype=np.int8)
    inits = {"sx": np.array(0.02, np.float32), "zx": np.array(5, xdt), "w": w,
             "sw": rng.uniform(0.002, 0.02, m).astype(np.float32), "zw": np.zeros(m, np.int8),
             "sy": np.array(0.2, np.float32), "zy": np.array(-3 if xdt == np.int8 else 9, xdt),
             "bias": rng.integers(-3000, 3000, m).astype(np.int32)}
    node = helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "bias"], ["y"],
                            pads=[1, 0, 1, 2], strides=[2, 1], group=group)
    _check(_model([node], inits, x.shape, xdt, xdt), x, "QLinearConv", monkeypatch)


def _dynamic_quantize_gemm(activation, n=21):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((9, 67)).astype(np.float32)
    w = rng.integers(-127, 128, (n, 67), dtype=np.int8)
    inits = {"w": w, "ws": rng.uniform(0.001, 0.01, n).astype(np.float32),
             "bias": rng.standard_normal(n).astype(np.float32)}
    node = helper.make_node("DynamicQuantizeGemm", ["x", "w", "ws", "bias"], ["y"], domain="ai.nnhal",
                            activation=activation, block=0)
    return _model([node], inits, x.shape, np.float32, np.float32, domains=("ai.nnhal",)), x, inits


@pytest.mark.parametrize("activation", ["int8", "uint8"])
def test_dynamic_quantize_gemm_seven_bit_activations(activation, monkeypatch):
    """NNHAL_QGEMM_A7=1 (avx2's default): rows quantized to [0, 127] whatever the node's activation type,
    equal to that integer reference bit for bit (the kernel tests run it on every instruction set)."""
    monkeypatch.setenv("NNHAL_QGEMM_A7", "1")
    model, x, inits = _dynamic_quantize_gemm(activation)
    session = nnhal.Session(model, devices=["cpu"])
    (got,) = session.run({"x": x})
    assert [st.kernel_name for st in _steps(session)] == ["int8 gemm"]
    np.testing.assert_array_equal(got, a7_reference(x, inits["w"], inits["ws"], inits["bias"]))


@pytest.mark.parametrize("activation", ["int8", "uint8"])
@pytest.mark.parametrize("n", [21, 80])
def test_dynamic_quantize_gemm_expanding_products_take_seven_bits(activation, n, monkeypatch):
    """NNHAL_QGEMM_A7=expanding (avx2's default): 7-bit rows where N > K (67), asymmetric uint8 rows elsewhere,
    int8 nodes included; each equal to its integer reference bit for bit."""
    monkeypatch.setenv("NNHAL_QGEMM_A7", "expanding")
    model, x, inits = _dynamic_quantize_gemm(activation, n)
    (got,) = nnhal.Session(model, devices=["cpu"]).run({"x": x})
    want = a7_reference(x, inits["w"], inits["ws"], inits["bias"]) if n > 67 \
        else _dynamic_ref(x, inits["w"], False, inits["ws"], inits["bias"])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("activation", ["int8", "uint8"])
def test_dynamic_quantize_gemm_whole_rows_runs_the_integer_gemm(activation, monkeypatch):
    monkeypatch.setenv("NNHAL_QGEMM_A7", "0")       # the node's own 8-bit activations
    model, x, _ = _dynamic_quantize_gemm(activation)
    session = nnhal.Session(model, devices=["cpu"])
    (got,) = session.run({"x": x})
    assert [st.kernel_name for st in _steps(session)] == ["int8 gemm"]
    monkeypatch.setenv("NNHAL_CPU_REFERENCE", "1")        # the numpy kernel, through float32 BLAS
    (want,) = nnhal.Session(model, devices=["cpu"]).run({"x": x})
    # both sum the same integers exactly (K * 255 * 127 < 2^24); they differ only in the float32 rounding
    # of the scale products, a few ulps of the output
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_static_qdq_matmul_with_per_column_weights_runs_the_integer_gemm():
    """DequantizeLinear -> MatMul -> QuantizeLinear (per-column weight scales, as onnxruntime's
    quantize_static writes it) fuses into one QLinearMatMul (optimizer/qdq.py) on the integer GEMM; the
    float QDQ graph's result and the exact integer one differ by at most one quantization step."""
    rng = np.random.default_rng(6)
    x = rng.integers(0, 256, (4, 6, 48), dtype=np.uint8)
    w = rng.integers(-127, 128, (48, 20), dtype=np.int8)
    inits = {"sx": np.array(0.03, np.float32), "zx": np.array(128, np.uint8), "w": w,
             "sw": rng.uniform(0.001, 0.01, 20).astype(np.float32), "zw": np.zeros(20, np.int8),
             "sy": np.array(0.04, np.float32), "zy": np.array(120, np.uint8)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wf"], axis=1),
             helper.make_node("MatMul", ["xf", "wf"], ["yf"]),
             helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["y"])]
    model = _model(nodes, inits, x.shape, np.uint8, np.uint8)
    session = nnhal.Session(model, devices=["cpu"])
    (got,) = session.run({"x": x})
    assert [st.kernel_name for st in _steps(session) if st.node.op_type == "QLinearMatMul"] == ["int8 gemm"]
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert np.abs(got.astype(np.int32) - want).max() <= 1


def test_dynamic_quantize_linear_then_matmul_integer_runs_the_integer_gemm():
    """onnxruntime's dynamic quantization: DynamicQuantizeLinear's computed zero point feeds MatMulInteger."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((5, 40)).astype(np.float32)
    inits = {"w": rng.integers(-127, 128, (40, 12), dtype=np.int8), "zw": np.array(0, np.int8)}
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "zw"], ["y"])]
    _check(_model(nodes, inits, x.shape, np.float32, np.int32), x, "MatMulInteger")


def test_a_quantized_plan_counts_its_integer_products_for_the_thread_pools(monkeypatch):
    """The pools (and so the integer kernels' threads) are chosen by the median product size: QLinearConv
    counts as a product, so an int8 CNN's plan splits its convolutions like the fp32 one."""
    monkeypatch.delenv("NNHAL_CPU_POOL", raising=False)
    rng = np.random.default_rng(9)
    x = rng.integers(0, 256, (1, 8, 40, 40), dtype=np.uint8)
    inits = {"sx": np.array(0.02, np.float32), "zx": np.array(5, np.uint8),
             "w": rng.integers(-127, 128, (32, 8, 3, 3), dtype=np.int8), "sw": np.array(0.01, np.float32),
             "zw": np.array(0, np.int8), "sy": np.array(0.2, np.float32), "zy": np.array(9, np.uint8)}
    node = helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy"], ["y"], pads=[1] * 4)
    session = nnhal.Session(_model([node], inits, x.shape, np.uint8, np.uint8), devices=["cpu"])
    session.run({"x": x})
    assert [sg.stats["thread_pool"] for sg in session.graph.execution.subgraphs] == [True]
