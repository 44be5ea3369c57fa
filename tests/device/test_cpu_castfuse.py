"""device/cpu/castfuse.py: a float Cast at an NHWC region's edge folds into the layout conversion, and fp16
storage's Cast to float16 and back runs as one native rounding step; each bit-equal to running them apart."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
import nnhal.device.cpu.plan as plan_module


def _convs(channels: int, half_io: bool = False):
    """Two 3x3 convolutions; ``half_io``: a float16 input and output with Casts at the edges (an fp16 export)."""
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.standard_normal((8, channels, 3, 3)).astype(np.float32), "w0"),
             numpy_helper.from_array(rng.standard_normal((24, 8, 3, 3)).astype(np.float32), "w1")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w1"], ["y"], pads=[1, 1, 1, 1])]
    io = TensorProto.FLOAT
    if half_io:
        io = TensorProto.FLOAT16
        nodes[0].input[0] = "x32"
        nodes[-1].output[0] = "y32"
        nodes = [helper.make_node("Cast", ["x"], ["x32"], to=TensorProto.FLOAT), *nodes,
                 helper.make_node("Cast", ["y32"], ["y"], to=TensorProto.FLOAT16)]
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", io, (1, channels, 12, 10))],
                              [helper.make_tensor_value_info("y", io, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((1, channels, 12, 10)).astype(np.float16 if half_io else np.float32)
    return model, {"x": x}


def _run(model, feeds, precision="fp16"):
    with nnhal.Session(model, devices=["cpu"], precision=precision) as s:
        out = s.run(feeds)[0]
        steps = [(st.node.op_type, st.kernel_name) for sg in s.subgraphs for st in sg.device_graph.steps]
    return out, steps


@pytest.mark.parametrize("channels", [3, 32])     # the per-channel and the transposing conversion
@pytest.mark.usefixtures("conversions_at_edges")     # the edges this test is about convert
def test_edge_casts_fold_into_the_layout_conversions(monkeypatch, channels):
    model, feeds = _convs(channels, half_io=True)
    fused, steps = _run(model, feeds, "fp32")
    assert not any(op == "Cast" for op, _ in steps), steps
    assert [k for _, k in steps if k in ("to-nhwc", "to-nchw")] == ["to-nhwc", "to-nchw"]
    monkeypatch.setattr(plan_module, "fuse_relayout_casts", lambda chosen, external: chosen)
    apart, steps_apart = _run(model, feeds, "fp32")
    assert sum(op == "Cast" for op, _ in steps_apart) == 2
    assert fused.dtype == apart.dtype == np.float16
    np.testing.assert_array_equal(fused, apart)


@pytest.mark.parametrize("channels", [3, 32])
@pytest.mark.usefixtures("conversions_at_edges")     # the edges this test is about convert
def test_fp16_edges_round_in_one_native_step_each(monkeypatch, channels):
    model, feeds = _convs(channels)
    fused, steps = _run(model, feeds)
    # the input's rounding is a step of its own, the output's is folded into its to-nchw conversion
    # (layout.py Relayout round_half: one native pass)
    assert [k for op, k in steps if op == "Cast"] == ["round-half"], steps
    assert [k for _, k in steps if k in ("to-nhwc", "to-nchw")] == ["to-nhwc", "to-nchw"]
    monkeypatch.setattr(plan_module, "fuse_half_round_trips", lambda chosen, external: chosen)
    apart, steps_apart = _run(model, feeds)
    assert sum(op == "Cast" for op, _ in steps_apart) >= 2 and "round-half" not in {k for _, k in steps_apart}
    assert fused.dtype == apart.dtype == np.float32
    np.testing.assert_array_equal(fused, apart)
