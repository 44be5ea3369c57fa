"""com.microsoft QGemm and DynamicQuantizeMatMul on the cpu device's integer GEMM (device/cpu/integer.py)
against onnxruntime: QGemm's integer outputs bit for bit and its float outputs bit for bit (onnxruntime's
float32 operations in its order), DynamicQuantizeMatMul within the float32 rounding of its dequantization.

NOTE: onnxruntime's u8 x s8 kernel on AVX2 CPUs without VNNI (``vpmaddubsw``) saturates pairs of products at
16 bits, so its results are exact only for |B| <= 64 (255 * 64 * 2 < 2^15); the cases keep B there, where
onnxruntime's integer arithmetic is exact on every CPU, and a separate case checks the full range against
the exact integer reference."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import native, qnative

ort = pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.skipif(not qnative.status().available or not native.available(),
                                reason=f"integer kernels: {qnative.status().reason}; native: {native.status().reason}")

TYPES = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
         np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32}


def _model(node, x: np.ndarray, inits: dict, y_dtype):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TYPES[x.dtype], x.shape)],
                              [helper.make_tensor_value_info("y", TYPES[np.dtype(y_dtype)], None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    opsets = [helper.make_opsetid("", 19), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=9)


def _nnhal(model, x, op):
    with nnhal.Session(model, devices=["cpu"]) as session:
        (got,) = session.run({"x": x})
        kernels = [st.kernel_name for sg in session.graph.execution.subgraphs for st in sg.device_graph.steps
                   if st.node.op_type == op]
    return got, kernels


def _ort(model, x):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _ints(rng, dtype, shape, lo=None, hi=None):
    info = np.iinfo(dtype)
    return rng.integers(info.min if lo is None else lo, (info.max if hi is None else hi) + 1, shape).astype(dtype)


def _qgemm(rng, m, k, n, a_dtype, b_dtype, out, c, per_column, trans_a, trans_b, alpha, b_range=64):
    a = _ints(rng, a_dtype, (k, m) if trans_a else (m, k))
    lo = -b_range if b_dtype == np.int8 else 128 - b_range
    b = _ints(rng, b_dtype, (n, k) if trans_b else (k, n), lo, lo + 2 * b_range)
    size = n if per_column else 1
    b_zero = np.zeros(size, b_dtype) if b_dtype == np.int8 else np.full(size, 128, b_dtype)
    if b_dtype == np.uint8:
        b_zero = (b_zero + _ints(rng, np.int8, size, -3, 3).astype(np.int16)).astype(np.uint8)
    inits = {"a_s": np.array(0.021, np.float32), "a_z": _ints(rng, a_dtype, ()),
             "b": b, "b_s": rng.uniform(0.001, 0.01, size).astype(np.float32), "b_z": b_zero}
    names = ["x", "a_s", "a_z", "b", "b_s", "b_z"]
    if c:
        inits["c"] = rng.integers(-3000, 3000, n).astype(np.int32)
    names.append("c" if c else "")
    y_dtype = np.float32
    if out != "float":
        y_dtype = np.dtype(a_dtype)         # onnxruntime's QGemm writes A's type
        inits["y_s"] = np.array(0.05, np.float32)
        inits["y_z"] = _ints(rng, y_dtype, (), -20 if y_dtype == np.int8 else 100, 20 if y_dtype == np.int8 else 150)
        names += ["y_s", "y_z"]
    node = helper.make_node("QGemm", names, ["y"], domain="com.microsoft", alpha=alpha, transA=int(trans_a),
                            transB=int(trans_b))
    return _model(node, a, inits, y_dtype), a, inits


@pytest.mark.parametrize("out", ["float", "quantized"])
@pytest.mark.parametrize("c", [False, True])
@pytest.mark.parametrize("a_dtype,b_dtype,per_column,trans_a,trans_b,alpha", [
    (np.uint8, np.int8, True, False, False, 1.0),
    (np.uint8, np.int8, False, False, True, 0.7),
    (np.int8, np.int8, True, True, False, 1.0),
    (np.uint8, np.uint8, True, False, True, 0.35),
])
def test_qgemm_runs_the_integer_gemm_bit_equal_to_onnxruntime(out, c, a_dtype, b_dtype, per_column, trans_a,
                                                             trans_b, alpha):
    rng = np.random.default_rng(11)
    model, a, _ = _qgemm(rng, 13, 77, 21, a_dtype, b_dtype, out, c, per_column, trans_a, trans_b, alpha)
    want = _ort(model, a)
    got, kernels = _nnhal(model, a, "QGemm")
    assert kernels == ["int8 gemm"]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("out", ["float", "uint8"])
def test_qgemm_on_the_full_weight_range_equals_the_exact_integer_reference(out):
    """Where onnxruntime saturates on AVX2: the exact sums, then onnxruntime's float32 operations."""
    rng = np.random.default_rng(12)
    model, a, inits = _qgemm(rng, 9, 300, 17, np.uint8, np.int8, out, True, True, False, False, 0.5, b_range=128)
    got, kernels = _nnhal(model, a, "QGemm")
    assert kernels == ["int8 gemm"]
    acc = (a.astype(np.int64) - inits["a_z"].astype(np.int64)) @ inits["b"].astype(np.int64) + inits["c"]
    scale = np.float32(0.5) * inits["a_s"] * inits["b_s"]
    value = acc.astype(np.float32) * scale
    if out == "float":
        np.testing.assert_array_equal(got, value)
        return
    want = np.clip(np.rint(acc.astype(np.float32) * (scale / inits["y_s"])) + inits["y_z"].astype(np.float32), 0, 255)
    np.testing.assert_array_equal(got, want.astype(np.uint8))


def test_qgemm_with_a_full_c_matrix_stays_on_the_numpy_kernel_and_is_exact():
    rng = np.random.default_rng(13)
    model, a, inits = _qgemm(rng, 5, 40, 6, np.uint8, np.int8, "float", False, True, False, False, 1.0)
    c = rng.integers(-3000, 3000, (5, 6)).astype(np.int32)
    graph = model.graph
    graph.initializer.append(numpy_helper.from_array(c, "c"))
    graph.node[0].input[6] = "c"
    got, kernels = _nnhal(model, a, "QGemm")
    assert kernels and kernels != ["int8 gemm"]
    acc = (a.astype(np.int64) - inits["a_z"].astype(np.int64)) @ inits["b"].astype(np.int64) + c
    np.testing.assert_array_equal(got, acc.astype(np.float32) * (inits["a_s"] * inits["b_s"]))


def _dqmm(rng, shape, k, n, b_dtype, per_column, zero, bias):
    lo = -64 if b_dtype == np.int8 else 64
    size = n if per_column else 1
    inits = {"b": _ints(rng, b_dtype, (k, n), lo, lo + 128), "b_s": rng.uniform(0.001, 0.01, size).astype(np.float32)}
    names = ["x", "b", "b_s"]
    if zero:
        inits["b_z"] = _ints(rng, b_dtype, size, -3 if b_dtype == np.int8 else 125, 3 if b_dtype == np.int8 else 131)
    names.append("b_z" if zero else "")
    if bias:
        inits["bias"] = rng.standard_normal(n).astype(np.float32)
        names.append("bias")
    node = helper.make_node("DynamicQuantizeMatMul", names, ["y"], domain="com.microsoft")
    x = (rng.standard_normal((*shape, k)) * 2 + 0.3).astype(np.float32)
    return _model(node, x, inits, np.float32), x, inits


@pytest.mark.parametrize("b_dtype,per_column,zero,bias,shape", [
    (np.int8, True, True, True, (2, 7)),
    (np.int8, False, False, False, (9,)),
    (np.uint8, True, True, True, (3, 5)),
    (np.uint8, False, True, False, (1,)),
])
def test_dynamic_quantize_matmul_runs_the_integer_gemm_as_onnxruntime(b_dtype, per_column, zero, bias, shape,
                                                                      monkeypatch):
    rng = np.random.default_rng(14)
    model, x, inits = _dqmm(rng, shape, 67, 23, b_dtype, per_column, zero, bias)
    got, kernels = _nnhal(model, x, "DynamicQuantizeMatMul")
    assert kernels == ["int8 gemm"]
    monkeypatch.setenv("NNHAL_CPU_REFERENCE", "1")
    numpy_kernel, kernels = _nnhal(model, x, "DynamicQuantizeMatMul")
    assert kernels and kernels != ["int8 gemm"]
    np.testing.assert_array_equal(got, numpy_kernel)        # the same codes, float32 operations and order
    want = _ort(model, x)
    assert got.shape == want.shape
    # NOTE: the same codes give the same exact sum; what may differ is the float32 rounding of the scale, the
    # product and the bias: a few ulp of the largest term
    tol = 8 * np.finfo(np.float32).eps * (np.abs(want) + np.abs(inits.get("bias", 0))).max()
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)


@pytest.mark.parametrize("op", ["QGemm", "DynamicQuantizeMatMul"])
def test_the_pooled_numpy_kernels_equal_the_integer_ones(op, monkeypatch):
    """Where the integer kernels do not take a node, the cpu device's pooled numpy kernels run it (the native
    DynamicQuantizeLinear for DynamicQuantizeMatMul): the same values."""
    from nnhal.device.cpu import integer

    rng = np.random.default_rng(15)
    if op == "QGemm":
        model, x, _ = _qgemm(rng, 33, 200, 40, np.uint8, np.int8, "float", True, True, False, False, 0.5, b_range=128)
    else:
        model, x, _ = _dqmm(rng, (3, 11), 200, 40, np.int8, True, True, True)
    fast, kernels = _nnhal(model, x, op)
    assert kernels == ["int8 gemm"]
    monkeypatch.delitem(integer._KERNELS, ("com.microsoft", op))
    slow, kernels = _nnhal(model, x, op)
    assert kernels == ["pooled"]
    np.testing.assert_array_equal(fast, slow)
