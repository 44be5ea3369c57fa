"""Layout conversions that keep the elements' order (device/cpu/layout.py Relayout.view: one channel, or one
pixel as after a global pool) run as views of their input, no copy: the whole graphs against onnxruntime, at
fp32 and with fp16 storage (whose Casts must not fold into a view), and the kernel itself against numpy's
transposing copy, bit for bit."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu.layout import TO_NCHW, TO_NHWC, Relayout, keeps_order
from nnhal.graph.node import Node
from nnhal.operator.base import Info

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")


@pytest.mark.parametrize("shape, perm, kept", [
    ((2, 1, 9, 13), TO_NHWC, True),        # one channel
    ((2, 5, 1, 1), TO_NHWC, True),         # one pixel
    ((1, 1, 1, 7), TO_NCHW, True),         # a pooled NHWC map back
    ((2, 3, 9, 13), TO_NHWC, False),
    ((1, 1, 4, 7), TO_NCHW, False),        # NHWC (1, 1, 4, 7): 7 channels of 4 pixels
    ((1, 3, 1, 5), TO_NHWC, False),
])
def test_keeps_order_is_whether_the_transpose_is_a_reshape(shape, perm, kept):
    x = np.arange(int(np.prod(shape))).reshape(shape)
    assert keeps_order(shape, perm) is kept
    assert np.array_equal(np.ascontiguousarray(x.transpose(perm)).reshape(-1), x.reshape(-1)) is kept


@pytest.mark.parametrize("shape, perm", [((2, 1, 9, 13), TO_NHWC), ((2, 5, 1, 1), TO_NHWC), ((3, 1, 1, 8), TO_NCHW)])
def test_an_order_keeping_conversion_is_a_view(shape, perm):
    out_shape = tuple(shape[p] for p in perm)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    node = Node("r", "Transpose", ["x"], ["y"], {"perm": list(perm)}, opset=21, version=21)
    kernel = Relayout(perm, shape=shape)
    assert kernel.view == {0: 0}
    assert Relayout(perm, shape=shape).rounding().view == {}          # rounding changes values: a pass
    (got,) = kernel.prepare(node, [Info(np.dtype(np.float32), shape)], [Info(np.dtype(np.float32), out_shape)])(
        [x], [None])
    assert np.shares_memory(got, x)
    np.testing.assert_array_equal(got, x.transpose(perm))


def _pooled(out_pool: bool, channels_in: int):
    """Conv -> Relu -> GlobalAveragePool, the pooled map a graph output (``out_pool``) or flattened into a Gemm;
    ``channels_in`` 1: the input's conversion to NHWC keeps the order too."""
    rng = np.random.default_rng(5)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c2"], ["pooled"])]
    outputs = ["pooled"]
    inits = [w("w1", 16, channels_in, 3, 3), w("w2", 24, 16, 3, 3)]
    if not out_pool:
        nodes += [helper.make_node("Flatten", ["pooled"], ["flat"]),
                  helper.make_node("Gemm", ["flat", "fc", "fb"], ["logits"], transB=1)]
        outputs = ["logits"]
        inits += [w("fc", 5, 24), w("fb", 5)]
    graph = helper.make_graph(nodes, "pooled",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, channels_in, 20, 28))],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("channels_in", [1, 3])
@pytest.mark.parametrize("out_pool", [True, False], ids=["pooled-output", "classifier"])
@pytest.mark.parametrize("checked", [False, True], ids=["generated", "checked"])
def test_graphs_with_order_keeping_conversions_match_onnxruntime(out_pool, channels_in, precision, checked,
                                                                 monkeypatch):
    if checked:
        monkeypatch.setenv("NNHAL_CHECK", "1")
    model = _pooled(out_pool, channels_in)
    x = np.random.default_rng(2).standard_normal((1, channels_in, 20, 28)).astype(np.float32)
    kept = x.copy()
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with nnhal.Session(model, devices=["cpu"], precision=precision) as s:
        runs = [s.run({"x": x}) for _ in range(3)]
        steps = [st for sg in s.graph.execution.subgraphs for st in sg.device_graph.steps]
    views = [st.node.outputs[0] for st in steps if st.kernel_name in ("to-nhwc", "to-nchw") and st.kernel.view]
    copies = [st.node.outputs[0] for st in steps if st.kernel_name == "to-nhwc" and not st.kernel.view]
    if precision == "fp32":
        # the pooled map's conversion back is a view; the one-channel input is never copied to NHWC (a view, or
        # no conversion at all where the first Conv reads the NCHW input itself: direct-nchw-in)
        assert "pooled" in views, views
        if channels_in == 1:
            assert "x#nhwc" not in copies, copies
    np.testing.assert_array_equal(x, kept)                              # a view of the input is only read
    # fp32: sums of at most 144 products in other orders; fp16 storage: each stored tensor rounded to 11 bits
    tol = 1e-5 if precision == "fp32" else 2e-2
    for got in runs:
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, float(np.abs(w).max())))
    assert not np.shares_memory(runs[0][0], runs[1][0])                # each run's outputs are its own
