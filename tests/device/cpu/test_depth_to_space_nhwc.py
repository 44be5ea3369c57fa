"""DepthToSpace in channels-last regions (device/cpu/kernels/depth_to_space.py): a channels-last op whose NHWC
input needs no conversion, writing NHWC for a channels-last reader or NCHW straight away (the layout pass's
``nchw_output`` hook). Only exact ops around it (MaxPool), so bit-equal to onnxruntime on both plan paths."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import nnhal

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")


def _model(c: int, r: int, mode: str, after: bool, dtype=TensorProto.FLOAT):
    """x (1, c*r*r, 5, 7) -> MaxPool -> DepthToSpace -> (a MaxPool when ``after``) -> output."""
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], pads=[0, 0, 1, 1]),
             helper.make_node("DepthToSpace", ["p"], ["d"], blocksize=r, mode=mode)]
    out = "d"
    if after:
        nodes.append(helper.make_node("MaxPool", ["d"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
        out = "y"
    graph = helper.make_graph(nodes, "d2s", [helper.make_tensor_value_info("x", dtype, (1, c * r * r, 5, 7))],
                              [helper.make_tensor_value_info(out, dtype, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("checked", [False, True], ids=["generated", "checked"])
@pytest.mark.parametrize("after", [False, True], ids=["to-nchw", "nhwc"])
@pytest.mark.parametrize("c,r,mode", [(1, 3, "DCR"), (3, 2, "DCR"), (5, 2, "CRD"), (2, 3, "CRD")])
def test_depth_to_space_stays_channels_last_and_moves_bits_exactly(monkeypatch, checked, after, c, r, mode):
    if checked:
        monkeypatch.setenv("NNHAL_CHECK", "1")
    model = _model(c, r, mode, after)
    x = np.random.default_rng(c * 10 + r).standard_normal((1, c * r * r, 5, 7)).astype(np.float32)
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run({"x": x})
        steps = [st for sg in s.graph.execution.subgraphs for st in sg.device_graph.steps]
    kernels = {st.node.op_type: st.kernel_name for st in steps}
    assert kernels["DepthToSpace"] == ("nhwc" if after else "nhwc-to-nchw")
    # conversions only of the input and (after the last MaxPool) of the output: none around the DepthToSpace
    relayouts = [st.node.inputs[0].split("#")[0] for st in steps if st.kernel_name in ("to-nhwc", "to-nchw")]
    assert relayouts == (["x", "y"] if after else ["x"]), relayouts
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])


def test_an_nchw_depth_to_space_keeps_the_reference():
    graph = helper.make_graph([helper.make_node("DepthToSpace", ["x"], ["d"], blocksize=2)], "d2s",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 8, 3, 3))],
                              [helper.make_tensor_value_info("d", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = np.random.default_rng(1).standard_normal((1, 8, 3, 3)).astype(np.float32)
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run({"x": x})
        steps = [st for sg in s.graph.execution.subgraphs for st in sg.device_graph.steps]
    assert [st.kernel_name for st in steps] == ["reference"]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])
