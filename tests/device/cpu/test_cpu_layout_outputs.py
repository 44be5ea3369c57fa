"""A channels-last convolution whose output leaves the graph and also feeds another channels-last convolution
(a PAN neck's levels): the output is converted to NCHW once, and the next convolution reads the NHWC original
instead of a conversion back (device/cpu/layout.py)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")


def _pan_levels():
    rng = np.random.default_rng(4)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["p3"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p3", "w3"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w4"], ["p4"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "pan", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 8, 24, 24))],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("p3", "p4")],
                              [w("w1", 24, 8, 3, 3), w("w2", 24, 24, 3, 3), w("w3", 24, 24, 3, 3),
                               w("w4", 24, 24, 3, 3)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("checked", [False, True], ids=["generated", "checked"])
def test_an_output_read_by_the_next_convolution_is_converted_once(monkeypatch, checked):
    if checked:
        monkeypatch.setenv("NNHAL_CHECK", "1")
    model = _pan_levels()
    x = np.random.default_rng(0).standard_normal((1, 8, 24, 24)).astype(np.float32)
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run({"x": x})
        steps = [st for sg in s.graph.execution.subgraphs for st in sg.device_graph.steps]
    convs = [st.kernel_name for st in steps if st.node.op_type == "Conv"]
    relayouts = [(st.kernel_name, st.node.outputs[0]) for st in steps if st.kernel_name in ("to-nhwc", "to-nchw")]
    assert all(k.startswith(("nhwc", "direct-nchw")) for k in convs), convs
    # the stem reads x NCHW and p4's Conv writes it NCHW (the direct kernel's channels-first sides); p3 is
    # converted once: none back into the region for the Conv reading it
    assert convs[0] == "direct-nchw-in" and convs[-1] == "direct-nchw-out", convs
    assert sorted(relayouts) == [("to-nchw", "p3")], relayouts
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, w in zip(got, want):
        # float32 convolutions of at most 216 terms: a few units of 2^-23 relative to the sum of |terms|
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(w).max())))
