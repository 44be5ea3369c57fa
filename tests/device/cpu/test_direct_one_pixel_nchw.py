"""The direct convolution writing an NCHW output of one pixel an image (kernels/_conv_nhwc.py DirectNchwSides,
kernel ``direct-nchw-out``): a squeeze-excite gate's 1x1 convolution on its pooled (N, C, 1, 1) map at the edge of a
channels-last region. The C side tells an NCHW output from a channels-last one by its channel stride (OH * OW), 1
here, and refused the (N, M, 1, 1) array ("must hold 1 pixels of M channels"). Against onnxruntime.

Tolerance: each output sums K = C * 9 (the 3x3) then C (the 1x1) products in another order than onnxruntime:
at most 2 K 2^-24 sum |w x| per layer, bounded by 2 K^2 2^-24 max|w| max|input| (times the second layer's C)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")


@pytest.mark.parametrize("n,c,m", [(1, 8, 32), (2, 6, 13)])
def test_a_one_pixel_nchw_output_of_the_direct_convolution(n, c, m):
    rng = np.random.default_rng(n * 10 + m)
    w1 = (rng.standard_normal((c, c, 3, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((m, c, 1, 1)) * 0.3).astype(np.float32)
    b2 = (rng.standard_normal(m) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("GlobalAveragePool", ["r1"], ["g"]),
             helper.make_node("Conv", ["g", "w2", "b2"], ["c2"]),
             helper.make_node("Sigmoid", ["c2"], ["y"])]
    inits = [numpy_helper.from_array(a, name) for a, name in ((w1, "w1"), (w2, "w2"), (b2, "b2"))]
    graph = helper.make_graph(nodes, "se_gate", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (n, c, 6, 5))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = rng.standard_normal((n, c, 6, 5)).astype(np.float32)
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run({"x": x})[0]
        kernels = [st.kernel_name for sg in s.graph.execution.subgraphs for st in sg.device_graph.steps
                   if st.node.op_type == "Conv"]
    assert kernels[-1] == "direct-nchw-out", kernels
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    k1, k2 = c * 9, c
    first = 2 * k1 * k1 * 2.0 ** -24 * float(np.abs(w1).max()) * float(np.abs(x).max())
    hidden = k1 * float(np.abs(w1).max()) * float(np.abs(x).max())
    bound = (first * k2 + 2 * k2 * k2 * 2.0 ** -24 * hidden) * float(np.abs(w2).max()) + 1e-7
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=bound)
