"""The layout pass's conversions (device/cpu/layout.py Relayout): every channel count and every float32 /
float16 pair a folded Cast makes and fp16 storage's rounding (castfuse.py), bit for bit against numpy's
transposing copy (each element is moved and at most rounded once, so the order of the two maps cannot change a
bit)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import castfuse, native
from nnhal.device.cpu.layout import TO_NCHW, TO_NHWC, Relayout
from nnhal.graph.node import Node
from nnhal.operator.base import Info


@pytest.mark.parametrize("pair", [(np.float32, np.float32), (np.float32, np.float16), (np.float16, np.float32),
                                  (np.int32, np.int32), (np.float64, np.float32)])
@pytest.mark.parametrize("perm", [TO_NHWC, TO_NCHW], ids=["to-nhwc", "to-nchw"])
@pytest.mark.parametrize("channels", [1, 3, 6, 7, 8, 12, 17, 40])
def test_a_conversion_is_numpys_transposing_copy(pair, perm, channels):
    src, dst = pair
    shape = (2, channels, 9, 13) if perm == TO_NHWC else (2, 9, 13, channels)
    out_shape = tuple(shape[p] for p in perm)
    x = (np.random.default_rng(channels).standard_normal(shape) * 300).astype(src)
    node = Node("r", "Transpose", ["x"], ["y"], {"perm": list(perm)}, opset=21, version=21)
    run = Relayout(perm).prepare(node, [Info(np.dtype(src), shape)], [Info(np.dtype(dst), out_shape)])
    want = x.transpose(perm).astype(dst)
    y = np.full(out_shape, 5, dst)
    (got,) = run([x], [y])
    assert got is y
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype
    (got,) = run([x], [None])
    np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(not native.available(), reason=f"native kernels not loaded: {native.status().reason}")
@pytest.mark.parametrize("perm", [TO_NHWC, TO_NCHW], ids=["to-nhwc", "to-nchw"])
@pytest.mark.parametrize("channels", [1, 3, 8, 12, 17, 40])
def test_a_conversion_with_the_half_rounding_folded_in_rounds_every_element_once(perm, channels):
    shape = (2, channels, 9, 13) if perm == TO_NHWC else (2, 9, 13, channels)
    out_shape = tuple(shape[p] for p in perm)
    x = (np.random.default_rng(channels).standard_normal(shape) * 3000).astype(np.float32)
    x.flat[:4] = [70000.0, -1e-8, np.inf, np.nan]               # past float16's range, below it, inf, NaN
    node = Node("r", "Transpose", ["x"], ["y"], {"perm": list(perm)}, opset=21, version=21)
    run = Relayout(perm, round_half=True).prepare(node, [Info(np.dtype(np.float32), shape)],
                                                  [Info(np.dtype(np.float32), out_shape)])
    with np.errstate(over="ignore"):
        want = x.transpose(perm).astype(np.float16).astype(np.float32)
    for y in (np.empty(out_shape, np.float32), None):
        (got,) = run([x], [y])
        np.testing.assert_array_equal(got, want)
    (got,) = run([np.asfortranarray(x)], [None])                   # a strided input: numpy's path
    np.testing.assert_array_equal(got, want)


def _segmenter():
    """A convolutional region whose last convolution's 8-channel map is the graph output (LR-ASPP's mask)."""
    rng = np.random.default_rng(9)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["mask"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "seg", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 32, 32))],
                              [helper.make_tensor_value_info("mask", TensorProto.FLOAT, None)],
                              [w("w1", 16, 3, 3, 3), w("w2", 8, 16, 3, 3)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.skipif(not native.available(), reason=f"native kernels not loaded: {native.status().reason}")
@pytest.mark.parametrize("checked", [False, True], ids=["generated", "checked"])
@pytest.mark.usefixtures("conversions_at_edges")     # the edges this test is about convert
def test_fp16_storage_rounds_the_output_inside_its_conversion(monkeypatch, checked):
    if checked:
        monkeypatch.setenv("NNHAL_CHECK", "1")
    model = _segmenter()
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)

    def run():
        with nnhal.Session(model, devices=["cpu"], precision="fp16") as s:
            got = s.run({"x": x})
            return got, [st for sg in s.graph.execution.subgraphs for st in sg.device_graph.steps]

    got, steps = run()
    last = [st for st in steps if st.kernel_name == "to-nchw"]
    assert len(last) == 1 and last[0].node.outputs == ["mask"], [(st.kernel_name, st.node.outputs) for st in steps]
    assert "mask" not in {o for st in steps if st.kernel_name == "round-half" for o in st.node.outputs}
    with monkeypatch.context() as m:
        m.setattr(castfuse, "_rounding", lambda *args: False)
        unfused, plain = run()
    assert any(st.kernel_name == "round-half" and st.node.outputs == ["mask"] for st in plain)
    # the same roundings of the same float32 values in another order: bit-equal
    for g, u in zip(got, unfused):
        np.testing.assert_array_equal(g, u)
