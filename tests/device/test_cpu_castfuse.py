"""fp16 storage: the Casts at an NHWC region's edges fold into the layout conversions (device/cpu/castfuse.py),
bit-equal to running them apart."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
import nnhal.device.cpu.plan as plan_module


def _convs(channels: int):
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.standard_normal((8, channels, 3, 3)).astype(np.float32), "w0"),
             numpy_helper.from_array(rng.standard_normal((24, 8, 3, 3)).astype(np.float32), "w1")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w1"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                             (1, channels, 12, 10))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((1, channels, 12, 10)).astype(np.float32)}


def _run(model, feeds):
    with nnhal.Session(model, devices=["cpu"], precision="fp16") as s:
        out = s.run(feeds)[0]
        steps = [(st.node.op_type, st.kernel_name) for sg in s.subgraphs for st in sg.device_graph.steps]
    return out, steps


@pytest.mark.parametrize("channels", [3, 32])     # the per-channel and the transposing conversion
def test_edge_casts_fold_into_the_layout_conversions(monkeypatch, channels):
    model, feeds = _convs(channels)
    fused, steps = _run(model, feeds)
    assert not any(op == "Cast" for op, _ in steps), steps
    assert [k for _, k in steps if k in ("to-nhwc", "to-nchw")] == ["to-nhwc", "to-nchw"]
    monkeypatch.setattr(plan_module, "fuse_relayout_casts", lambda chosen, external: chosen)
    apart, steps_apart = _run(model, feeds)
    assert sum(op == "Cast" for op, _ in steps_apart) == 2
    assert fused.dtype == apart.dtype
    np.testing.assert_array_equal(fused, apart)
