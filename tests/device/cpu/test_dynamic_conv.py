"""Convolutions whose weights (and bias) are run-time tensors (conv.ConvDynamic, _conv_nhwc.ConvDynamicNHWC):
Siamese trackers' cross-correlations, dynamic filters. Against the reference kernel (the same geometry with
the weights as constants) and onnxruntime."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu.kernels import select
from nnhal.errors import ShapeError
from nnhal.hostkernels.fused import Activation
from nnhal.operator.base import Info
from tests.device.cpu.test_nhwc_conv import CASES, make, reference

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "benchmarks")


def _dynamic(ins):
    """The infos with the weights and the bias made run-time tensors of the same static shapes."""
    return [ins[0], Info(ins[1].value.dtype, ins[1].value.shape),
            *([Info(ins[2].value.dtype, ins[2].value.shape)] if len(ins) > 2 and ins[2] is not None else [])]


def _check_kernel(name: str, bias: bool, act, layout: str | None, dtype=np.float32, tol: float = 1e-4) -> None:
    node, ins, outs, x, wv, bv = make(name, bias, act, dtype)
    dins = _dynamic(ins)
    kernel = select(node, dins, outs, layout=layout)
    assert kernel.name == ("nhwc-dynamic" if layout else "dynamic")
    run = kernel.prepare(node, dins, outs)
    rng = np.random.default_rng(len(name))
    n, m, oh, ow = outs[0].shape
    xin = np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if layout else x
    # two different weight sets through the same prepared run: each packed at its run
    for k in range(2):
        w = wv if k == 0 else (rng.standard_normal(wv.shape) * np.abs(wv).max()).astype(dtype)
        b = None if bv is None else (bv if k == 0 else rng.standard_normal(bv.shape).astype(dtype))
        expect = reference(node, [ins[0], Info.of(w), *([Info.of(b)] if bias else [])], outs, x, w, b)
        (got,) = run([xin, w, *([b] if bias else [])], [None])
        got = got.transpose(0, 3, 1, 2) if layout else got
        assert got.shape == (n, m, oh, ow) and got.dtype == dtype
        scale = float(np.abs(expect).max()) or 1.0
        np.testing.assert_allclose(got, expect, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("layout", [None, "NHWC"], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("name", [n for n in CASES if not n.startswith("winograd")] + ["winograd-30"])
def test_dynamic_conv_matches_reference(name, bias, layout):
    _check_kernel(name, bias, None, layout)


@pytest.mark.parametrize("layout", [None, "NHWC"], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("name", ["3x3-p1-s2", "dw3x3", "g16-supergroups", "1x1-g4", "7x7-s2-p3"])
def test_dynamic_conv_fused_activation_and_float64(name, layout):
    _check_kernel(name, True, Activation("relu"), layout)
    _check_kernel(name, True, Activation("clip", np.asarray(-0.5, np.float32), np.asarray(0.5, np.float32)), layout)
    _check_kernel(name, True, None, layout, np.float64, 1e-10)


def test_dynamic_conv_scores_and_shapes():
    node, ins, outs, x, wv, bv = make("3x3-p1", True, None)
    dins = _dynamic(ins)
    for layout, name in ((None, "dynamic"), ("NHWC", "nhwc-dynamic")):
        assert select(node, ins, outs, layout=layout).name != name          # constant weights: packed once
        kernel = select(node, dins, outs, layout=layout)
        assert kernel.name == name
        run = kernel.prepare(node, dins, outs)
        xin = np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if layout else x
        with pytest.raises(ShapeError, match="Conv.*run-time weights of shape"):
            run([xin, wv[:, :, :2], bv], [None])
        with pytest.raises(ShapeError, match="bias"):
            run([xin, wv, bv[:3]], [None])
    # run-time weights of another dtype than the input, or of unknown shape: the reference kernel runs it
    other = [ins[0], Info(np.dtype(np.float64), wv.shape), dins[2]]
    assert select(node, other, outs).name not in ("dynamic", "nhwc-dynamic")
    unknown = [ins[0], Info(wv.dtype, (None, 8, 3, 3)), dins[2]]
    assert select(node, unknown, outs).name not in ("dynamic", "nhwc-dynamic")


def _conv_model(x_shape, w_shape, group, strides, dilations, pads, bias: bool, around: bool, dtype=TensorProto.FLOAT):
    """A Conv whose weights (and bias) are graph inputs; ``around``: between two constant-weight convolutions
    with ReLUs (its input and output in a channels-last region)."""
    rng = np.random.default_rng(sum(x_shape) + sum(w_shape))
    c = x_shape[1]
    nodes, inits = [], []
    x = "x"
    if around:
        inits.append(numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) * 0.2).astype(np.float32), "w0"))
        nodes += [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", ["a"], ["r"])]
        x = "r"
    nodes.append(helper.make_node("Conv", [x, "w", *(["b"] if bias else [])], ["y" if not around else "d"], group=group,
                                  strides=list(strides), dilations=list(dilations), pads=list(pads)))
    if around:
        m = w_shape[0]
        inits.append(numpy_helper.from_array((rng.standard_normal((4, m, 1, 1)) * 0.2).astype(np.float32), "w1"))
        nodes += [helper.make_node("Relu", ["d"], ["e"]), helper.make_node("Conv", ["e", "w1"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", dtype, x_shape), helper.make_tensor_value_info("w", dtype, w_shape)]
    if bias:
        inputs.append(helper.make_tensor_value_info("b", dtype, [w_shape[0]]))
    graph = helper.make_graph(nodes, "dynconv", inputs, [helper.make_tensor_value_info("y", dtype, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    np_dtype = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    feeds = {"x": rng.standard_normal(x_shape).astype(np_dtype),
             "w": rng.standard_normal(w_shape).astype(np_dtype) / np.sqrt(np.prod(w_shape[1:])).astype(np_dtype)}
    if bias:
        feeds["b"] = rng.standard_normal(w_shape[0]).astype(np_dtype)
    return model, feeds


# (x shape, w shape, group, strides, dilations, pads)
ORT_CASES = {
    "dw-xcorr-siamrpn": ((1, 64, 29, 31), (64, 1, 5, 7), 64, (1, 1), (1, 1), (0, 0, 0, 0)),
    "xcorr-siamfc": ((1, 32, 22, 21), (1, 32, 6, 5), 1, (1, 1), (1, 1), (0, 0, 0, 0)),
    "xcorr-deep": ((1, 128, 20, 19), (1, 128, 7, 6), 1, (1, 1), (1, 1), (0, 0, 0, 0)),
    "xcorr-batch-templates": ((1, 24, 17, 17), (3, 24, 5, 5), 1, (1, 1), (1, 1), (0, 0, 0, 0)),
    "dw-mult3-s2": ((2, 6, 15, 13), (18, 1, 3, 3), 6, (2, 2), (1, 1), (1, 1, 1, 1)),
    "grouped-dilated": ((1, 24, 19, 17), (36, 8, 3, 3), 3, (1, 2), (2, 3), (2, 1, 2, 3)),
    "odd-kernel-asym-pads": ((1, 5, 13, 11), (7, 5, 4, 3), 1, (3, 2), (1, 1), (0, 2, 1, 0)),
    "1x1-dynamic-filter": ((2, 16, 9, 7), (12, 16, 1, 1), 1, (1, 1), (1, 1), (0, 0, 0, 0)),
    "1x1-s2-grouped": ((1, 16, 9, 8), (8, 4, 1, 1), 4, (2, 2), (1, 1), (0, 0, 0, 0)),
}


def _kernel_names(session):
    return [st.kernel_name for sg in session.graph.execution.subgraphs for st in sg.device_graph.steps
            if st.node.op_type == "Conv"]


@pytest.mark.parametrize("around", [False, True], ids=["alone", "in-region"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("name", list(ORT_CASES))
def test_dynamic_conv_matches_onnxruntime(name, bias, around):
    model, feeds = _conv_model(*ORT_CASES[name], bias, around)
    s = nnhal.Session(model, devices=["cpu"])
    got = s.run(feeds)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    scale = float(np.abs(want[0]).max())
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4 * scale)
    names = _kernel_names(s)
    assert ("nhwc-dynamic" if around else "dynamic") in names, names
    # new weights on the same session: packed at this run, not kept from the first
    feeds2 = {**feeds, "w": -2 * feeds["w"]}
    want2 = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds2)
    np.testing.assert_allclose(s.run(feeds2)[0], want2[0], rtol=1e-4, atol=1e-4 * float(np.abs(want2[0]).max()))


@pytest.mark.parametrize("name", ["dw-xcorr-siamrpn", "xcorr-siamfc", "xcorr-deep", "grouped-dilated"])
def test_dynamic_conv_in_float16(name):
    """A float16 model (its Conv runs the reference kernel in float16, as a float16 Conv with constant weights
    does) and a float32 one at precision="fp16" (the dynamic kernel between casts), against
    onnxruntime in float32: errors within float16's rounding of the inputs and of each product sum (a
    relative 2^-11 per rounding, the sums over C/G * KH * KW terms of |x * w|)."""
    model16, feeds16 = _conv_model(*ORT_CASES[name], True, False, TensorProto.FLOAT16)
    feeds32 = {k: v.astype(np.float32) for k, v in feeds16.items()}
    model32, _ = _conv_model(*ORT_CASES[name], True, False)
    want = ort.InferenceSession(model32.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds32)[0]
    # the bound: |y| and the sum of |x * w| over a window, from the float32 convolution of |x| by |w|
    abs_feeds = {"x": np.abs(feeds32["x"]), "w": np.abs(feeds32["w"]), "b": np.abs(feeds32["b"])}
    mass = ort.InferenceSession(model32.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, abs_feeds)[0]
    bound = 8 * 2.0 ** -11 * (mass + np.abs(want)) + 1e-3
    got16 = nnhal.Session(model16, devices=["cpu"]).run(feeds16)[0]
    assert got16.dtype == np.float16
    assert np.all(np.abs(got16.astype(np.float32) - want) <= bound)
    session = nnhal.Session(model32, devices=["cpu"], precision="fp16")
    got_fp16 = session.run(feeds32)[0]
    assert np.all(np.abs(got_fp16.astype(np.float32) - want) <= bound)
    assert _kernel_names(session) == ["dynamic"]         # float16 storage, the float32 kernel between casts


def test_siamese_tracker_matches_onnxruntime():
    """The benchmark's SiamRPN++-like tracker (benchmarks/models/siamrpn.py), small: the depthwise and plain
    cross-correlations run on the dynamic-weight kernels."""
    pytest.importorskip("torch")
    sys.path.insert(0, os.path.abspath(BENCHMARKS))
    try:
        from models import siamrpn
    finally:
        sys.path.pop(0)
    model, feeds = siamrpn.build(seed=3, width=8, channels=32, batch=2, template=127, search=191)
    s = nnhal.Session(model, devices=["cpu"])
    got = s.run(feeds)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * float(np.abs(w).max()))
    names = _kernel_names(s)
    assert sum(n in ("dynamic", "nhwc-dynamic") for n in names) == 3, names
