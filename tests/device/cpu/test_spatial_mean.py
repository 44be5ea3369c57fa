"""A ReduceMean over axes (2, 3) of an image runs as a GlobalAveragePool (device/cpu/spatial_mean.py), channels
last after a convolution (no conversion of the map back to NCHW), channels first alone; against onnxruntime.

Tolerance: both sides sum H * W float32 terms per channel in different orders; each partial sum's rounding is
at most 2^-24 of the running magnitude, so the mean differs by at most H * W * 2^-24 * max|x| (a bound, with
a factor 4 for the convolution before it, whose own sums of C * 9 terms differ the same way)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")


def _model(n: int, c: int, h: int, w: int, axes, keepdims: int, opset: int, conv: bool, also_pooled: bool = False):
    """x -> [Conv 3x3 + Relu] -> ReduceMean(axes, keepdims) -> y (and the Relu's map as an output)."""
    rng = np.random.default_rng(c * 7 + h)
    inits, nodes, src = [], [], "x"
    if conv:
        inits.append(numpy_helper.from_array(rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.3, "w"))
        nodes += [helper.make_node("Conv", ["x", "w"], ["cv"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", ["cv"], ["map"])]
        src = "map"
    if opset >= 18:
        inits.append(numpy_helper.from_array(np.asarray(axes, np.int64), "axes"))
        nodes.append(helper.make_node("ReduceMean", [src, "axes"], ["y"], keepdims=keepdims))
    else:
        nodes.append(helper.make_node("ReduceMean", [src], ["y"], axes=list(axes), keepdims=keepdims))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if also_pooled and conv:
        outputs.append(helper.make_tensor_value_info("map", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "spatial_mean", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                   (n, c, h, w))], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _run(model, x):
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run({"x": x})
        steps = [st for sg in s.graph.execution.subgraphs for st in sg.device_graph.steps]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    return got, want, steps


@pytest.mark.parametrize("n,c,h,w,axes,keepdims,opset,conv,also_pooled", [
    (1, 24, 7, 7, (2, 3), 0, 17, True, False),      # torchvision ShuffleNet v2's head: x.mean((2, 3))
    (2, 13, 9, 5, (-2, -1), 1, 17, True, False),    # odd channels, batch 2, negative axes, keepdims
    (1, 5, 6, 11, (3, 2), 0, 18, True, True),        # axes as an input (opset 18), the map also an output
    (2, 7, 4, 3, (2, 3), 1, 18, False, False),       # alone: a channels-first plan
    (1, 3, 1, 1, (2, 3), 0, 17, False, False),       # a 1x1 map
    (1, 4, 5, 5, (2, 3), 0, 21, True, False),        # opset 21: Flatten's version 21
])
def test_spatial_mean_is_a_global_average_pool(n, c, h, w, axes, keepdims, opset, conv, also_pooled):
    model = _model(n, c, h, w, axes, keepdims, opset, conv, also_pooled)
    x = np.random.default_rng(n + c).standard_normal((n, c, h, w)).astype(np.float32)
    got, want, steps = _run(model, x)
    ops = [st.node.op_type for st in steps]
    assert "ReduceMean" not in ops and "GlobalAveragePool" in ops, ops
    if conv and not also_pooled:
        # the map stays channels last: only the input (unless the convolution reads it in place) and the pooled
        # (one-pixel) result are converted
        relayouts = sorted(st.node.inputs[0].split("#")[0] for st in steps if st.kernel_name in ("to-nhwc", "to-nchw"))
        assert len(relayouts) in (1, 2) and not {"map", "cv"} & set(relayouts), relayouts
    for g, ref in zip(got, want):
        assert g.shape == ref.shape
        bound = h * w * 2.0 ** -24 * float(np.abs(ref).max() + 1) * (4 if conv else 1)
        np.testing.assert_allclose(g, ref, rtol=0, atol=bound)


@pytest.mark.parametrize("axes", [(1, 2), (2,), (1, 2, 3)])
def test_other_reductions_stay_reduce_means(axes):
    model = _model(1, 6, 5, 4, axes, 1, 17, True)
    x = np.random.default_rng(3).standard_normal((1, 6, 5, 4)).astype(np.float32)
    got, want, steps = _run(model, x)
    assert "ReduceMean" in [st.node.op_type for st in steps]
    np.testing.assert_allclose(got[0], want[0], rtol=0, atol=6 * 20 * 2.0 ** -24 * 4 * float(np.abs(want[0]).max() + 1))
