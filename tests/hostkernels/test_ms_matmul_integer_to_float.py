"""com.microsoft MatMulIntegerToFloat against its definition: exact integer sums of (A - a_zero) (B - b_zero),
then times a_scale * b_scale, plus the bias. onnxruntime's own kernels are no oracle on every CPU: on x86 without
VNNI they sum u8 x s8 pairs in 16 bits with saturation (vpmaddubsw) and were off by up to 19 on this test's
values on an AVX2 EPYC."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal

M, K, N = 5, 17, 9


@pytest.mark.parametrize("b_dtype,per_column,bias,zero_points", [
    (np.int8, False, True, True), (np.uint8, True, False, True), (np.int8, True, True, False)])
def test_matmul_integer_to_float_matches_its_definition(b_dtype, per_column, bias, zero_points):
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (2, M, K)).astype(np.uint8)
    info = np.iinfo(b_dtype)
    b = rng.integers(info.min, info.max + 1, (K, N)).astype(b_dtype)
    b_scale = (rng.random(N) * 0.1 + 0.01).astype(np.float32) if per_column else np.float32(0.05)
    inits = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(np.asarray(b_scale, np.float32), "bs")]
    names = ["A", "B", "as", "bs"]
    if zero_points:
        inits += [numpy_helper.from_array(np.uint8(3), "az"),
                  numpy_helper.from_array((np.full(N, 2) if per_column else np.array(2)).astype(b_dtype), "bz")]
        names += ["az", "bz"]
    if bias:
        names += [] if zero_points else ["", ""]
        inits.append(numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "bias"))
        names.append("bias")
    node = helper.make_node("MatMulIntegerToFloat", names, ["Y"], domain="com.microsoft")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.UINT8, a.shape),
                                            helper.make_tensor_value_info("as", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    feeds = {"A": a, "as": np.array(0.02, np.float32)}
    a_zero, b_zero = (3, (np.full(N, 2) if per_column else 2)) if zero_points else (0, 0)
    sums = (a.astype(np.int64) - a_zero) @ (b.astype(np.int64) - b_zero)           # exact
    want = sums * (np.float64(0.02) * np.asarray(b_scale, np.float64))
    if bias:
        want = want + numpy_helper.to_array(inits[-1]).astype(np.float64)
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run(feeds)[0]
    # the integer sums are exact; the two scale products and the bias add round in float32: at most 3 roundings
    # of |y| (plus the bias's own magnitude)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=4 * 2.0 ** -23, atol=4 * 2.0 ** -23 * 3)
