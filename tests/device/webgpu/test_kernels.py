"""Kernel geometries the node suite does not reach, against onnxruntime: grouped/dilated/strided Conv
with asymmetric pads (both GEMM shapes, fused bias + residual + Relu), broadcast batched MatMul, Gemm
transposes, and Resize with constant scales."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")
RNG = np.random.default_rng(5)


def _model(nodes, inputs, inits, opset=17):
    graph = helper.make_graph(nodes, "k", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _compare(model, feeds, gemm="auto"):
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    with nnhal.Session(model, devices=["webgpu"], device_options={"webgpu": {"gemm": gemm}}, strict=True) as s:
        got = s.run(feeds)[0]
        placed = {d.device for d in s.placement.values()}
    assert placed == {"webgpu"}
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(want).max())))


@pytest.mark.parametrize("gemm", ["direct", "tiled"])
@pytest.mark.parametrize("group,dil,stride,pads", [(1, 1, 1, [1, 1, 1, 1]), (2, 2, 2, [0, 1, 2, 1]),
                                                   (3, 1, 3, [2, 0, 0, 2]), (6, 1, 1, [1, 1, 1, 1])])
def test_conv_bias_residual_relu(webgpu, gemm, group, dil, stride, pads):
    cin, cout = 6, 12 if group != 6 else 6
    x = RNG.standard_normal((2, cin, 11, 9)).astype(np.float32)
    w = RNG.standard_normal((cout, cin // group, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], group=group, dilations=[dil, dil],
                            strides=[stride, stride], pads=pads)
    probe = ort.InferenceSession(_model([conv], [("x", x.shape)], {"w": w, "b": b}).SerializeToString(),
                                 providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    r = RNG.standard_normal(probe.shape).astype(np.float32)
    nodes = [conv, helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    _compare(_model(nodes, [("x", x.shape)], {"w": w, "b": b, "r": r}), {"x": x}, gemm)


@pytest.mark.parametrize("gemm", ["direct", "tiled"])
def test_batched_matmul_broadcast_and_gemm_transposes(webgpu, gemm):
    a = RNG.standard_normal((3, 1, 5, 70)).astype(np.float32)
    bm = RNG.standard_normal((4, 70, 33)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["a", "b"], ["m"]), helper.make_node("Tanh", ["m"], ["y"])]
    _compare(_model(nodes, [("a", a.shape)], {"b": bm}), {"a": a}, gemm)
    x = RNG.standard_normal((19, 7)).astype(np.float32)
    w = RNG.standard_normal((40, 19)).astype(np.float32)
    c = RNG.standard_normal((1, 40)).astype(np.float32)
    gemm_node = helper.make_node("Gemm", ["x", "w", "c"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0)
    _compare(_model([gemm_node], [("x", x.shape)], {"w": w, "c": c}), {"x": x}, gemm)


@pytest.mark.parametrize("mode,ctm", [("nearest", "asymmetric"), ("nearest", "half_pixel"),
                                      ("linear", "half_pixel"), ("linear", "align_corners"),
                                      ("linear", "pytorch_half_pixel")])
def test_resize_with_constant_scales(webgpu, mode, ctm):
    x = RNG.standard_normal((1, 3, 5, 7)).astype(np.float32)
    scales = np.array([1, 1, 2.0, 0.6], np.float32)
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode, coordinate_transformation_mode=ctm)
    _compare(_model([node], [("x", x.shape)], {"scales": scales}, opset=19), {"x": x})
