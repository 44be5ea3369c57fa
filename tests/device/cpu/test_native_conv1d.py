"""1-D convolutions on the native im2col kernel (device/cpu/kernels/conv1d.py) against the ONNX reference
evaluator, within the reordered-sum bound of conformance/tolerance.py (each output a sum of C * K products)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.conformance import tolerance
from nnhal.device.cpu import native

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.status().reason}")


def _model(x_shape, w_shape, bias: bool, relu: bool, **attrs):
    rng = np.random.default_rng(3)
    w = rng.standard_normal(w_shape).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W")]
    names = ["X", "W"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(w_shape[0]).astype(np.float32), "B"))
        names.append("B")
    nodes = [helper.make_node("Conv", names, ["C" if relu else "Y"], **attrs)]
    if relu:
        nodes.append(helper.make_node("Relu", ["C"], ["Y"]))
    graph = helper.make_graph(nodes, "conv1d", [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    x = rng.standard_normal(x_shape).astype(np.float32)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), {"X": x}, w


CASES = [
    ((1, 40, 200), (64, 40, 5), True, True, {"pads": [2, 2], "strides": [2]}),
    ((2, 16, 37), (24, 16, 3), True, False, {"pads": [1, 1]}),
    ((1, 32, 300), (8, 32, 8), False, True, {"strides": [4]}),
    ((3, 5, 50), (7, 5, 4), True, True, {"pads": [3, 0], "dilations": [2]}),
    ((1, 1, 64), (4, 1, 9), True, False, {"pads": [4, 4], "strides": [3], "dilations": [1]}),
]


@pytest.mark.parametrize("pool", ["1", "0"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("x_shape,w_shape,bias,relu,attrs", CASES)
def test_native_1d_convolution_matches_the_reference(x_shape, w_shape, bias, relu, attrs, threads, pool, monkeypatch):
    # NNHAL_CPU_POOL=1: the native call; =0: the pools off, the numpy path of the same kernel
    monkeypatch.setenv("NNHAL_CPU_POOL", pool)
    model, feeds, w = _model(x_shape, w_shape, bias, relu, **attrs)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    with nnhal.Session(model, devices=["cpu"], num_thread=threads) as s:
        got = s.run(feeds)[0]
        assert "native-1d" in s.subgraphs[0].stats["kernels"].values()
    # every output sums C * K products of |x| |w| (a bias adds one term): bound them by the largest magnitudes
    k = w_shape[1] * w_shape[2]
    magnitude = k * float(np.abs(feeds["X"]).max()) * float(np.abs(w).max()) + 10.0
    tolerance.assert_within_bound(got, want, tolerance.reduction_bound(magnitude, k + 1))


def test_grouped_1d_keeps_the_numpy_kernel():
    model, feeds, _ = _model((1, 8, 30), (8, 2, 3), True, False, pads=[1, 1], group=4)
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run(feeds)[0]
        assert "native-1d" not in s.subgraphs[0].stats["kernels"].values()
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_a_strided_input_view_and_a_chain_of_1d_convolutions_match_the_reference():
    # a Slice with steps hands the first Conv a strided view (numpy's transposing copy); the second Conv reads
    # the first's contiguous output (the native transposes both ways)
    rng = np.random.default_rng(9)
    w1 = rng.standard_normal((24, 16, 4)).astype(np.float32)
    w2 = rng.standard_normal((8, 24, 3)).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2")]
    inits += [numpy_helper.from_array(np.asarray(v, np.int64), n) for n, v in
              (("s0", [0, 0]), ("s1", [32, 400]), ("ax", [1, 2]), ("st", [2, 3]))]
    nodes = [helper.make_node("Slice", ["X", "s0", "s1", "ax", "st"], ["S"]),
             helper.make_node("Conv", ["S", "W1"], ["C1"], strides=[2]), helper.make_node("Relu", ["C1"], ["R"]),
             helper.make_node("Conv", ["R", "W2"], ["Y"], pads=[1, 1])]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("X", TensorProto.FLOAT, (1, 32, 400))],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"X": rng.standard_normal((1, 32, 400)).astype(np.float32)}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = s.run(feeds)[0]
        assert list(s.subgraphs[0].stats["kernels"].values()).count("native-1d") == 2
    # the second Conv sums 72 products of inputs each a sum of 64 products: bound by the magnitudes
    inner = 64 * float(np.abs(feeds["X"]).max()) * float(np.abs(w1).max())
    magnitude = 72 * inner * float(np.abs(w2).max())
    tolerance.assert_within_bound(got, want, tolerance.reduction_bound(magnitude, 64 + 72))


def _embedding_conv_model(second_reader: bool):
    """Gather (an Embedding) -> Transpose (0, 2, 1) -> Conv1d + Relu, the Transpose's output also read by a
    ReduceMax when ``second_reader``."""
    rng = np.random.default_rng(11)
    table = rng.standard_normal((50, 16)).astype(np.float32)
    w = rng.standard_normal((24, 16, 6)).astype(np.float32)
    inits = [numpy_helper.from_array(table, "E"), numpy_helper.from_array(w, "W"),
             numpy_helper.from_array(rng.standard_normal(24).astype(np.float32), "B")]
    nodes = [helper.make_node("Gather", ["E", "ids"], ["G"]),
             helper.make_node("Transpose", ["G"], ["T"], perm=[0, 2, 1]),
             helper.make_node("Conv", ["T", "W", "B"], ["C"], strides=[3], pads=[1, 2]),
             helper.make_node("Relu", ["C"], ["Y"])]
    outputs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)]
    if second_reader:
        nodes.append(helper.make_node("ReduceMax", ["T"], ["M"], axes=[2], keepdims=0))
        outputs.append(helper.make_tensor_value_info("M", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "emb_conv", [helper.make_tensor_value_info("ids", TensorProto.INT64, (2, 300))],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"ids": rng.integers(0, 50, (2, 300)).astype(np.int64)}, table, w


@pytest.mark.parametrize("pool", ["1", "0"])
@pytest.mark.parametrize("second_reader", [False, True])
def test_a_transposed_embedding_is_read_channels_last_and_matches_the_reference(second_reader, pool, monkeypatch):
    # NNHAL_CPU_POOL=0: the fused kernel's numpy path (a transposed view of its (N, W, C) input)
    monkeypatch.setenv("NNHAL_CPU_POOL", pool)
    model, feeds, table, w = _embedding_conv_model(second_reader)
    want = ReferenceEvaluator(model).run(None, feeds)
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = s.run(feeds)
        kernels = [(st.node.op_type, st.kernel_name) for st in s.subgraphs[0].device_graph.steps]
    if second_reader:       # the Transpose stays: another node reads its output
        assert ("Transpose", "swap") in kernels and ("Conv", "native-1d") in kernels
    else:
        assert [op for op, _ in kernels] == ["Gather", "Conv"] and ("Conv", "native-1d, nwc input") in kernels
    k = 16 * 6
    magnitude = k * float(np.abs(table).max()) * float(np.abs(w).max()) + 10.0
    tolerance.assert_within_bound(got[0], want[0], tolerance.reduction_bound(magnitude, k + 1))
    if second_reader:
        np.testing.assert_array_equal(got[1], want[1])
