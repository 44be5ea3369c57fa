"""Split in channels-last regions (device/cpu/layout.py treats a channel Split as layout-free) and the native row
copy that runs it (device/cpu/kernels/split.py SplitRows): the kernel against numpy's split, and YOLO C2f-like
graphs against onnxruntime on the interpreting and the generated plan paths, with the conversions counted."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import native
from nnhal.device.cpu.kernels.split import SplitRows, SplitView
from nnhal.graph.node import Node
from nnhal.operator.base import Info

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")
needs_native = pytest.mark.skipif(not native.available(), reason=f"native kernels not loaded: {native.status().reason}")


@needs_native
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
@pytest.mark.parametrize("shape,axis,sizes", [
    ((1, 9, 11, 24), 3, (12, 12)),
    ((1, 9, 11, 31), 3, (7, 0, 23, 1)),        # odd and empty parts
    ((4, 40, 16), 1, (15, 25)),
    ((3, 8, 100), -1, (50, 50)),
])
def test_the_row_copy_is_numpys_split(dtype, shape, axis, sizes):
    outs = []
    ax = axis % len(shape)
    for n in sizes:
        s = list(shape)
        s[ax] = n
        outs.append(Info(np.dtype(dtype), tuple(s)))
    ins = [Info(np.dtype(dtype), shape), Info(np.dtype(np.int64), (len(sizes),), np.asarray(sizes, np.int64))]
    node = Node("sp", "Split", ["x", "s"], [f"y{k}" for k in range(len(sizes))], {"axis": axis}, opset=13,
                version=13)
    kernel = SplitRows()
    assert kernel.score(node, ins, outs) > 0
    run = kernel.prepare(node, ins, outs)
    x = (np.random.default_rng(0).standard_normal(shape) * 40).astype(dtype)
    want = np.split(x, np.cumsum(sizes)[:-1], axis=ax)
    buffers = [np.full(o.shape, 3, dtype) for o in outs]
    got = run([x, None], buffers)
    for g, b, w in zip(got, buffers, want):
        assert g is b
        np.testing.assert_array_equal(g, w)
    got = run([np.asfortranarray(x), None], [None] * len(sizes))      # a strided input, no output buffers
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    strided = [np.zeros(o.shape[:-1] + (o.shape[-1] + 2,), dtype)[..., 1:-1] for o in outs]
    got = run([x, None], strided)                                       # strided output buffers
    for g, b, w in zip(got, strided, want):
        assert g is b
        np.testing.assert_array_equal(g, w)


def test_a_block_split_keeps_the_view_kernel():
    outs = [Info(np.dtype(np.float32), (1, 12, 40, 40))] * 2
    ins = [Info(np.dtype(np.float32), (1, 24, 40, 40)), Info(np.dtype(np.int64), (2,), np.asarray([12, 12]))]
    node = Node("sp", "Split", ["x", "s"], ["a", "b"], {"axis": 1}, opset=13, version=13)
    assert SplitRows().score(node, ins, outs) == 0


@pytest.mark.parametrize("parts", [1, 2, 3, 5])
def test_the_view_kernel_gives_every_block_as_a_view(parts):
    shape = (1, 1, 4 * parts, 3)
    outs = [Info(np.dtype(np.float32), (1, 1, 4, 3))] * parts
    node = Node("sp", "Split", ["x"], [f"y{k}" for k in range(parts)], {"axis": 2}, opset=18, version=18)
    kernel = SplitView()
    assert kernel.score(node, [Info(np.dtype(np.float32), shape)], outs) > 0
    run = kernel.prepare(node, [Info(np.dtype(np.float32), shape)], outs)
    x = np.random.default_rng(parts).standard_normal(shape).astype(np.float32)
    got = run([x], [None] * parts)
    assert type(got) is tuple and len(got) == parts
    for g, w in zip(got, np.split(x, parts, axis=2)):
        assert np.shares_memory(g, x)
        np.testing.assert_array_equal(g, w)


def _c2f(variant, opset=17):
    """Conv -> channel Split -> (a 3x3 Conv on the last part) -> Concat of the parts and the Conv -> 1x1 Conv;
    ``uneven`` splits 6 + 10, ``output`` lets the first part leave the graph, ``reread`` reads the first part
    in a second branch too."""
    rng = np.random.default_rng(7)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    sizes = [6, 10] if variant == "uneven" else [8, 8]
    split_in = ["c"] if opset < 13 else ["c", "sizes"]
    split_attrs = {"axis": 1, **({"split": sizes} if opset < 13 else {})}
    nodes = [helper.make_node("Conv", ["x", "wa"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c0"], ["c0s"]),
             helper.make_node("Mul", ["c0", "c0s"], ["c"]),
             helper.make_node("Split", split_in, ["p", "q"], **split_attrs),
             helper.make_node("Conv", ["q", "wb"], ["m"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["p", "q", "m"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "wc"], ["y"])]
    inits = [w("wa", 16, 8, 3, 3), w("wb", sizes[1], sizes[1], 3, 3), w("wc", 5, 16 + sizes[1], 1, 1)]
    if opset >= 13:
        inits.append(numpy_helper.from_array(np.asarray(sizes, np.int64), "sizes"))
    outputs = ["y"]
    if variant == "output":
        outputs.append("p")
    if variant == "reread":
        nodes.append(helper.make_node("Conv", ["p", "wd"], ["z"]))
        inits.append(w("wd", 3, sizes[0], 1, 1))
        outputs.append("z")
    graph = helper.make_graph(nodes, "c2f", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 8, 18, 18))],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize("checked", [False, True], ids=["generated", "checked"])
@pytest.mark.parametrize("variant,opset", [("plain", 17), ("uneven", 17), ("plain", 11), ("output", 17),
                                           ("reread", 17)])
@pytest.mark.usefixtures("conversions_at_edges")     # the edges this test is about convert
def test_a_channel_split_stays_channels_last_and_matches_onnxruntime(monkeypatch, variant, opset, checked):
    if checked:
        monkeypatch.setenv("NNHAL_CHECK", "1")
    model = _c2f(variant, opset)
    x = np.random.default_rng(2).standard_normal((1, 8, 18, 18)).astype(np.float32)
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run({"x": x})
        again = s.run({"x": x})
        steps = [st for sg in s.graph.execution.subgraphs for st in sg.device_graph.steps]
    relayouts = [st.node.inputs[0] for st in steps if st.kernel_name in ("to-nhwc", "to-nchw")]
    if variant == "output":
        # a part leaving the graph is stored NCHW, and so is everything joined to it by layout-free ops (the
        # Split, its input's Mul, the Concat): each convolution then touches an NCHW tensor and runs NCHW
        assert relayouts == []
    else:
        # only the input's conversion and the graph outputs': none around the Split or the Concat
        outputs = {o.name for o in model.graph.output}
        if native.available():
            assert {st.kernel_name for st in steps if st.node.op_type == "Split"} == {"native"}
        assert relayouts[0] == "x" and sorted(r.split("#")[0] for r in relayouts[1:]) == sorted(outputs), relayouts
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, a, w in zip(got, again, want):
        np.testing.assert_array_equal(g, a)
        # float32 convolutions of at most 144 terms: a few units of 2^-23 relative to the sum of |terms|
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(w).max())))
