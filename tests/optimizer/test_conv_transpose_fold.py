"""fold_affine_into_conv (optimizer/passes.py) on ConvTranspose: a following inference BatchNormalization or
per-channel Mul/Add scales the weight's output-channel axis (axis 1) and the bias; group > 1 is left alone.
Checked against onnxruntime on the unfolded model."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.conformance import tolerance

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")


def _model(c, m, k, s, group, bias, tail):
    rng = np.random.default_rng(c + m + k + group)
    shape = (1, c, 7, 6)
    inits = {"w": rng.standard_normal((c, m // group, k, k)).astype(np.float32),
             "g": (rng.random(m) + 0.5).astype(np.float32), "be": rng.standard_normal(m).astype(np.float32),
             "mu": rng.standard_normal(m).astype(np.float32), "var": (rng.random(m) + 0.1).astype(np.float32),
             "mul": rng.standard_normal((1, m, 1, 1)).astype(np.float32)}
    t_inputs = ["x", "w"]
    if bias:
        inits["b"] = rng.standard_normal(m).astype(np.float32)
        t_inputs.append("b")
    nodes = [helper.make_node("ConvTranspose", t_inputs, ["t"], kernel_shape=[k, k], strides=[s, s], group=group)]
    if tail == "bn":
        nodes.append(helper.make_node("BatchNormalization", ["t", "g", "be", "mu", "var"], ["a"], epsilon=1e-3))
    else:
        nodes.append(helper.make_node("Mul", ["t", "mul"], ["a"]))
    nodes.append(helper.make_node("Relu", ["a"], ["y"]))
    graph = helper.make_graph(nodes, "ctbn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, n) for n, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, rng.standard_normal(shape).astype(np.float32), inits


@pytest.mark.parametrize("c,m,k,s,group,bias,tail", [(8, 8, 2, 2, 1, False, "bn"), (6, 4, 3, 2, 1, True, "bn"),
                                                     (4, 5, 2, 2, 1, True, "mul"), (4, 6, 2, 2, 2, True, "bn")])
def test_an_affine_after_a_conv_transpose_folds_into_its_weights(c, m, k, s, group, bias, tail):
    model, x, inits = _model(c, m, k, s, group, bias, tail)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as sess:
        (got,) = sess.run({"x": x})
        ops = [st.node.op_type for sg in sess.subgraphs for st in sg.device_graph.steps]
    folded = "BatchNormalization" not in ops and "Mul" not in ops
    assert folded == (group == 1)
    # each output sums at most ceil(k/s)^2 * C / group products, then one scale and shift (a few roundings)
    terms = (-(-k // s)) ** 2 * c // group
    scale = max(float(np.abs(inits["g"] / np.sqrt(inits["var"] + 1e-3)).max()), float(np.abs(inits["mul"]).max()))
    magnitude = terms * float(np.abs(x).max()) * float(np.abs(inits["w"]).max()) * scale + 10.0
    tolerance.assert_within_bound(got, want, tolerance.reduction_bound(magnitude, terms + 4))
