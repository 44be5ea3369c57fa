"""ConvTranspose on the cpu device channels last (device/cpu/kernels/conv_transpose.py) against onnxruntime:
taps tiling the output with few output channels (kernel rows' products written in place), with more (one
product, then a reordering copy) and overlapping taps (slabs added), behind a Conv so the layout pass keeps the
tensors NHWC."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.conformance import tolerance

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")


# (input channels, output channels, kernel, stride, pads, bias): DBNet's 8 -> 8 and 8 -> 1 2x2 heads, a wider
# tiled one, and overlapping 3x3 taps with pads
CASES = [(8, 8, 2, 2, (0, 0, 0, 0), True), (8, 1, 2, 2, (0, 0, 0, 0), False), (16, 24, 2, 2, (0, 0, 0, 0), True),
         (6, 5, 3, 2, (1, 1, 1, 1), True), (4, 3, 3, 3, (0, 0, 0, 0), False)]


@pytest.mark.parametrize("c,m,k,s,pads,bias", CASES)
def test_channels_last_conv_transpose_matches_onnxruntime(c, m, k, s, pads, bias):
    rng = np.random.default_rng(c * m + k)
    shape = (2, 3, 11, 9)
    wc = rng.standard_normal((c, 3, 3, 3)).astype(np.float32)
    wt = rng.standard_normal((c, m, k, k)).astype(np.float32)
    inits = [numpy_helper.from_array(wc, "wc"), numpy_helper.from_array(wt, "wt")]
    t_inputs = ["r", "wt"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "bt"))
        t_inputs.append("bt")
    nodes = [helper.make_node("Conv", ["x", "wc"], ["h"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("ConvTranspose", t_inputs, ["y"], kernel_shape=[k, k], strides=[s, s], pads=list(pads))]
    graph = helper.make_graph(nodes, "ct", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal(shape).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as sess:
        (got,) = sess.run({"x": x})
        kernels = [(st.node.op_type, st.kernel_name) for st in sess.subgraphs[0].device_graph.steps]
    assert ("ConvTranspose", "nhwc") in kernels
    # each output sums at most ceil(k/s)^2 taps of C products of the Conv's outputs (each 27 products)
    taps = (-(-k // s)) ** 2 * c
    hidden = 27 * float(np.abs(x).max()) * float(np.abs(wc).max())
    magnitude = taps * hidden * float(np.abs(wt).max()) + 10.0
    tolerance.assert_within_bound(got, want, tolerance.reduction_bound(magnitude, taps + 28))
