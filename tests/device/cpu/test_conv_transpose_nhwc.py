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


def _head(c: int, m: int, k: int, s: int, act: str, conv_first: bool, extra_reader: bool = False,
          rank: int = 2, batch: int = 2, size: tuple = (11, 9)):
    """A ConvTranspose with bias followed by ``act`` (Relu or Sigmoid): behind a Conv (channels last) or straight
    on the graph input (left NCHW); ``extra_reader``: the ConvTranspose's output is also a graph output (the
    activation must not fold). Returns the model, an input and the bound of the pre-activation's error."""
    rng = np.random.default_rng(c * 31 + m * 7 + k + rank)
    spatial = tuple(size[:rank])
    cin = 3 if conv_first else c
    x = rng.standard_normal((batch, cin, *spatial)).astype(np.float32)
    wt = rng.standard_normal((c, m, *(k,) * rank)).astype(np.float32)
    bt = rng.standard_normal(m).astype(np.float32)
    inits = [numpy_helper.from_array(wt, "wt"), numpy_helper.from_array(bt, "bt")]
    nodes, src, hidden, depth = [], "x", float(np.abs(x).max()), 0
    if conv_first:
        wc = rng.standard_normal((c, cin, *(3,) * rank)).astype(np.float32)
        inits.append(numpy_helper.from_array(wc, "wc"))
        nodes.append(helper.make_node("Conv", ["x", "wc"], ["h"], pads=[1] * 2 * rank))
        src, depth = "h", cin * 3 ** rank
        hidden = depth * hidden * float(np.abs(wc).max())
    nodes += [helper.make_node("ConvTranspose", [src, "wt", "bt"], ["t"], kernel_shape=[k] * rank, strides=[s] * rank),
              helper.make_node(act, ["t"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("t", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "ct_act", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    taps = (-(-k // s)) ** rank * c
    magnitude = taps * hidden * float(np.abs(wt).max()) + float(np.abs(bt).max())
    # Relu and Sigmoid are 1-Lipschitz: the pre-activation's bound holds after them, plus the native Sigmoid's
    # few ulp of a result in [0, 1]
    return model, x, tolerance.reduction_bound(magnitude, taps + depth + 1) + 1e-6


def _run(model, x):
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as sess:
        got = sess.run({"x": x})
        steps = [(st.node.op_type, st.kernel_name) for st in sess.subgraphs[0].device_graph.steps]
    return got, want, steps


@pytest.mark.parametrize("act", ["Relu", "Sigmoid"])
@pytest.mark.parametrize("c,m,k,s", [(8, 8, 2, 2), (8, 1, 2, 2), (7, 13, 2, 2), (6, 5, 3, 2)])
def test_conv_transpose_fuses_activation_channels_last(c, m, k, s, act):
    """DBNet's heads (8 -> 8 then Relu, 8 -> 1 then Sigmoid), a wide tiled one with odd channels and overlapping
    taps: the activation folds into the channels-last ConvTranspose's epilogue (no step of its own)."""
    model, x, bound = _head(c, m, k, s, act, conv_first=True)
    (got,), (want,), steps = _run(model, x)
    assert ("ConvTranspose", "nhwc") in steps and all(op != act for op, _ in steps)
    tolerance.assert_within_bound(got, want, bound)


@pytest.mark.parametrize("rank,act", [(2, "Relu"), (1, "Sigmoid")])
def test_conv_transpose_fuses_activation_nchw(rank, act):
    """A ConvTranspose on the graph input (and a 1-D one) runs the host's NCHW kernel with the activation fused
    (ConvTransposeFused)."""
    model, x, bound = _head(5, 3, 3, 2, act, conv_first=False, rank=rank, batch=1, size=(8, 7))
    (got,), (want,), steps = _run(model, x)
    assert all(op != act for op, _ in steps) and any(op == "ConvTranspose" for op, _ in steps)
    tolerance.assert_within_bound(got, want, bound)


def test_conv_transpose_keeps_activation_of_a_shared_output():
    """The ConvTranspose's output is also a graph output: the Relu stays its own step and both are right."""
    model, x, bound = _head(8, 8, 2, 2, "Relu", conv_first=True, extra_reader=True)
    got, want, steps = _run(model, x)
    assert any(op == "Relu" for op, _ in steps)
    for g, w in zip(got, want):
        tolerance.assert_within_bound(g, w, bound)
