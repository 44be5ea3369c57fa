"""Inference BatchNormalization in a channels-last region on the native one-pass kernel
(device/cpu/kernels/batch_normalization.py): the numpy NHWC kernel's result up to a fused multiply-add, with the
activation the plan fused into it."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import native
from nnhal.device.cpu.kernels.batch_normalization import BatchNormalizationNative

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native kernels absent: {native.status().reason}")

EPS32 = 2.0 ** -24


def _model(act: str):
    """Conv -> Relu -> BatchNormalization -> act: the BatchNormalization follows an activation, so no pass can
    fold it into the convolution, and it ends the region."""
    rng = np.random.default_rng(5)
    c = 24
    params = [rng.uniform(0.5, 2, c), rng.standard_normal(c), rng.standard_normal(c), rng.uniform(0.1, 3, c)]
    inits = [numpy_helper.from_array(rng.standard_normal((c, 20, 3, 3)).astype(np.float32), "w")] + \
        [numpy_helper.from_array(p.astype(np.float32), n) for p, n in zip(params, ("s", "b", "m", "v"))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("BatchNormalization", ["r", "s", "b", "m", "v"], ["n"], epsilon=1e-3),
             helper.make_node(act, ["n"], ["y"])]
    graph = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 20, 10, 9))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((2, 20, 10, 9)).astype(np.float32)}


def _run(model, feeds):
    with nnhal.Session(model, devices=["cpu"]) as s:
        (y,) = s.run(feeds)
        kernels = {st.node.op_type: st.kernel_name for sg in s.subgraphs for st in sg.device_graph.steps}
    return y, kernels


@pytest.mark.parametrize("act", ["Relu", "Sigmoid", "Identity"])
def test_one_pass_matches_the_numpy_kernel(monkeypatch, act):
    model, feeds = _model(act)
    got, kernels = _run(model, feeds)
    assert kernels["BatchNormalization"] == "nhwc-native", kernels
    monkeypatch.setattr(BatchNormalizationNative, "score", lambda self, node, ins, outs: 0)
    want, kernels = _run(model, feeds)
    assert kernels["BatchNormalization"] == "nhwc"
    # x * a + b: one rounding fewer with a fused multiply-add; |x * a| + |b| <= |x * a + b| + 2 |b| bounds what is
    # rounded, and the activations after it are 1-Lipschitz
    pre, _ = _run(_model("Identity")[0], feeds)
    s, b, m, v = (numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer[1:])
    shift = np.abs(b - m * s / np.sqrt(v + 1e-3)).max()
    np.testing.assert_allclose(got, want, rtol=0, atol=4 * EPS32 * (float(np.abs(pre).max()) + 2 * shift))
