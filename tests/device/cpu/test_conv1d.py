"""1-D convolutions on the 2-D GEMM kernels (device/cpu/kernels/conv.py, Conv1dGemm) and, group 1 with the native
kernels loaded, on the cpu device's native im2col (device/cpu/kernels/conv1d.py), against the ONNX reference
evaluator."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.device.cpu import native

# (channels, filters, kernel, stride, dilation, pad, group, fused activation)
CASES = [(8, 16, 3, 1, 1, 1, 1, None), (8, 16, 5, 2, 1, 2, 1, "Relu"), (16, 16, 3, 1, 2, 2, 16, None),
         (8, 12, 1, 1, 1, 0, 1, "Sigmoid"), (32, 64, 8, 4, 1, 0, 1, "Relu"), (8, 8, 4, 2, 1, 1, 2, None),
         (4, 6, 3, 3, 1, 0, 1, None)]


def _model(c, m, k, s, d, p, g, act, w, b):
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["y" if act is None else "t"], kernel_shape=[k], strides=[s],
                              dilations=[d], pads=[p, p], group=g)]
    if act:
        nodes.append(helper.make_node(act, ["t"], ["y"]))
    graph = helper.make_graph(nodes, "conv1d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, c, 50))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("use_native", [True, False])
@pytest.mark.parametrize("c,m,k,s,d,p,g,act", CASES)
def test_conv1d_runs_on_the_gemm_kernels(c, m, k, s, d, p, g, act, use_native, monkeypatch):
    if use_native and not native.available():
        pytest.skip(f"native kernels: {native.status().reason}")
    if not use_native:
        monkeypatch.setattr(native, "available", lambda: False)
    rng = np.random.default_rng(3)
    w = rng.standard_normal((m, c // g, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    x = rng.standard_normal((1, c, 50)).astype(np.float32)
    model = _model(c, m, k, s, d, p, g, act, w, b)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    # a dot product of n = C/G * k + 1 terms (bias included) in float32 errs by at most n * 2^-23 * sum |w x|:
    # the same convolution of |x| and |w| (plus |b|) bounds every output's error; activations are 1-Lipschitz
    bound = ReferenceEvaluator(_model(c, m, k, s, d, p, g, None, np.abs(w), np.abs(b))).run(None, {"x": np.abs(x)})[0]
    n = c // g * k + 1
    with nnhal.Session(model, devices=["cpu"]) as sess:
        got = sess.run({"x": x})[0]
        kernel = sess.subgraphs[0].stats["kernels"][sess.subgraphs[0].nodes[0].name]
        assert kernel == ("native-1d" if use_native and g == 1 and k > 1 else "gemm-1d")
    assert got.shape == want.shape
    assert np.all(np.abs(got - want) <= 2 * n * 2.0 ** -23 * bound + 1e-7)
