"""A group-1 convolution of one input channel (a grey image or spectrogram stem, 1 -> M) runs on the direct
kernel (device/cpu/native/direct_conv.py), not as a depthwise convolution of multiplier M in numpy; against
onnxruntime on both plan paths."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.conformance.tolerance import assert_within_bound, gamma
from nnhal.device.cpu import native
from nnhal.device.cpu.native import direct_conv

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (pip install -e '.[test]')")

RNG = np.random.default_rng(31)


@pytest.mark.skipif(not native.available(), reason="the direct kernel is native")
@pytest.mark.parametrize("m, kernel, attrs", [
    (32, (3, 3), {"pads": [1, 1, 1, 1]}),
    (16, (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 1]}),
    (8, (5, 3), {"pads": [2, 0, 1, 1], "dilations": [2, 1]}),
    (20, (1, 7), {"strides": [1, 3]}),
])
def test_one_input_channel(m, kernel, attrs, monkeypatch):
    made = []
    make = direct_conv.make
    monkeypatch.setattr(direct_conv, "make", lambda *a: made.append(a) or make(*a))
    w = RNG.standard_normal((m, 1, *kernel)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    w2 = RNG.standard_normal((16, m, 3, 3)).astype(np.float32)
    # a second convolution after the first keeps the region channels last (the NHWC kernels)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 24, 40])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in (("w", w), ("b", b), ("w2", w2))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = RNG.standard_normal((1, 1, 24, 40)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    taps = kernel[0] * kernel[1]
    first = taps * float(np.abs(x).max()) * float(np.abs(w).max()) + float(np.abs(b).max())
    # the first convolution's rounding carried through the second, plus the second's own
    bound = 2 * (gamma(taps + 1) * first * 9 * m * float(np.abs(w2).max()) + gamma(9 * m + 1) * 9 * m * first
                 * float(np.abs(w2).max()))
    for check in ("1", "0"):
        monkeypatch.setenv("NNHAL_CHECK", check)
        with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
            assert_within_bound(s.run({"x": x})[0], want, bound)
    assert any(a[0].c == 1 for a in made), "the direct kernel did not take the one-channel convolution"
