"""unfold_reshaped_gemm: onnxruntime's Reshape(x, [M, K]) -> Gemm -> Reshape becomes MatMul (+ Add) on x's
leading axes, against onnxruntime on the same graph, and is left alone where it would not be the same."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.conformance.tolerance import gamma, matmul_bound

ort = pytest.importorskip("onnxruntime")


def _case(x_shape, flat, out_shape, k, n, bias=True, trans_b=0, extra_reader=False):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["f"]),
             helper.make_node("Gemm", ["f", "w"] + (["b"] if bias else []), ["g"], transB=trans_b),
             helper.make_node("Reshape", ["g", "s2"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)]
    if extra_reader:
        nodes.append(helper.make_node("Relu", ["g"], ["r"]))
        outputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, None))
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
             numpy_helper.from_array(np.array(flat, np.int64), "s1"),
             numpy_helper.from_array(np.array(out_shape, np.int64), "s2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = rng.standard_normal(x_shape).astype(np.float32)
    return model.SerializeToString(), x, w.T if trans_b else w, b


def _run(data, x):
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with nnhal.Session(data, devices=["cpu"]) as s:
        got = s.run({"x": x})
        report = s.graph.pass_report
    return got, want, report["unfold_reshaped_gemm"]


@pytest.mark.parametrize("x_shape,flat,out_shape,k,n,bias", [
    ((2, 7, 12), (14, 12), (2, 7, 10), 12, 10, True),          # restores x's axes: the last Reshape goes
    ((2, 7, 12), (14, 12), (2, 7, 2, 5), 12, 10, True),        # q/k/v: splits heads after
    ((2, 7, 3, 4), (14, 12), (2, 7, 10), 12, 10, True),        # output projection: merges heads before
    ((3, 2, 5, 12), (30, 12), (3, 2, 5, 10), 12, 10, False),   # rank 4, no bias
])
def test_unfolded_gemm_matches(x_shape, flat, out_shape, k, n, bias):
    data, x, w, b = _case(x_shape, flat, out_shape, k, n, bias)
    got, want, count = _run(data, x)
    assert count == 1
    x2 = x.reshape(-1, k)
    bound = matmul_bound(x2, w) + gamma(2) * (np.abs(x2) @ np.abs(w) + (np.abs(b) if bias else 0))
    diff = np.abs(got[0].reshape(-1, n).astype(np.float64) - want[0].reshape(-1, n))
    assert got[0].shape == want[0].shape and np.all(diff <= bound)


@pytest.mark.parametrize("kwargs", [{"trans_b": 1}, {"extra_reader": True}])
def test_left_alone(kwargs):
    data, x, _, _ = _case((2, 7, 12), (14, 12), (2, 7, 10), 12, 10, **kwargs)
    got, want, count = _run(data, x)
    assert count == 0
    for g, wv in zip(got, want, strict=True):
        np.testing.assert_allclose(g, wv, rtol=1e-5, atol=1e-5)
