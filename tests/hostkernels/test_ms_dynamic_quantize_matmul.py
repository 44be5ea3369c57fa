"""com.microsoft DynamicQuantizeMatMul's numpy kernel (the reference every device falls back to) against
onnxruntime, with B within |B| <= 64 where onnxruntime's u8 x s8 arithmetic is exact on every CPU (its AVX2
kernel saturates 16-bit pair sums beyond), and its shape inference's typed errors."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.errors import NnhalError

ort = pytest.importorskip("onnxruntime")

K, N = 45, 11


def _model(b, b_scale, b_zero, bias, x_type=TensorProto.FLOAT):
    inits = [numpy_helper.from_array(b, "b"), numpy_helper.from_array(b_scale, "bs")]
    names = ["x", "b", "bs"]
    if b_zero is not None:
        inits.append(numpy_helper.from_array(b_zero, "bz"))
    names.append("bz" if b_zero is not None else "")
    if bias is not None:
        inits.append(numpy_helper.from_array(bias, "bias"))
        names.append("bias")
    node = helper.make_node("DynamicQuantizeMatMul", names, ["y"], name="dqmm", domain="com.microsoft")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", x_type, [3, 4, K])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=9)


@pytest.mark.parametrize("b_dtype,per_column,zero,bias", [
    (np.int8, True, True, True), (np.int8, False, False, False), (np.uint8, True, True, False),
    (np.uint8, False, True, True)])
def test_the_numpy_kernel_matches_onnxruntime(b_dtype, per_column, zero, bias, monkeypatch):
    rng = np.random.default_rng(3)
    lo = -64 if b_dtype == np.int8 else 64
    size = N if per_column else 1
    b = rng.integers(lo, lo + 129, (K, N)).astype(b_dtype)
    b_scale = rng.uniform(0.001, 0.01, size).astype(np.float32)
    b_zero = rng.integers(lo + 60, lo + 68, size).astype(b_dtype) if zero else None
    bias_v = rng.standard_normal(N).astype(np.float32) if bias else None
    model = _model(b, b_scale, b_zero, bias_v)
    x = (rng.standard_normal((3, 4, K)) * 3 - 0.5).astype(np.float32)
    monkeypatch.setenv("NNHAL_CPU_REFERENCE", "1")
    with nnhal.Session(model, devices=["cpu"]) as session:
        (got,) = session.run({"x": x})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == want.shape == (3, 4, N) and got.dtype == np.float32
    # the same codes and exact sums; the scale product, the dequantization and the bias each round in float32
    tol = 4 * np.finfo(np.float32).eps * (np.abs(want).max() + (0 if bias_v is None else np.abs(bias_v).max()))
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)


def test_a_non_float_a_is_a_typed_error_naming_the_node():
    b = np.ones((K, N), np.int8)
    model = _model(b, np.array([0.1], np.float32), None, None, x_type=TensorProto.UINT8)
    with pytest.raises(NnhalError, match=r"'dqmm' \(com.microsoft::DynamicQuantizeMatMul, opset 1\).*uint8"):
        with nnhal.Session(model, devices=["cpu"]) as session:
            session.run({"x": np.ones((3, 4, K), np.uint8)})
