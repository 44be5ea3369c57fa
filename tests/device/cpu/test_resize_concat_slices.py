"""Resizes writing their channel slice of a channels-last Concat (plan.concat_slices with ResizeNHWCNative's
strided_output, kernels.c resize_nhwc through a pixel stride): an FPN/PAN neck's upsampled map beside a lateral
convolution, DBNet's four upsampled levels into one Concat. The native kernel into a slice against itself into a
contiguous array (bit-equal: the same code) and its neighbours untouched; whole graphs as torch exports them
(nearest x2 floor/asymmetric, bilinear half_pixel, odd channel counts, batch 2) against onnxruntime within the
bound of the reordered sums; the Resize is placed, and a Resize read by another op too keeps its copy."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.conformance.tolerance import assert_within_bound, gamma
from nnhal.device.cpu import native
from nnhal.device.cpu.kernels.resize import ResizeNHWCNative
from nnhal.graph.node import Node
from nnhal.operator.base import Info

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")
pytestmark = pytest.mark.skipif(not native.available(), reason=f"native kernels absent: {native.status().reason}")

NEAREST = dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
BILINEAR = dict(mode="linear", coordinate_transformation_mode="half_pixel")


@pytest.mark.parametrize("attrs", [NEAREST, BILINEAR], ids=["nearest", "bilinear"])
def test_the_native_resize_writes_a_channel_slice(attrs):
    """resize_nhwc into channels [5, 16) of a 23-channel tensor: the same values as into a contiguous array,
    the other channels untouched."""
    x = np.random.default_rng(1).standard_normal((2, 5, 7, 11)).astype(np.float32)       # NHWC
    node = Node("r", "Resize", ["x", "", "s"], ["y"], dict(attrs), opset=13, version=13)
    ins = [Info(np.dtype(np.float32), (2, 11, 5, 7)), None,
           Info(np.dtype(np.float32), (4,), np.array([1, 1, 2, 2], np.float32))]
    outs = [Info(np.dtype(np.float32), (2, 11, 10, 14))]
    kernel = ResizeNHWCNative()
    assert kernel.score(node, ins, outs) > 0 and kernel.strided_output
    run = kernel.prepare(node, ins, outs)
    (want,) = run([x], [None])
    wide = np.full((2, 10, 14, 23), 7.0, np.float32)
    (got,) = run([x], [wide[..., 5:16]])
    assert np.shares_memory(got, wide)
    np.testing.assert_array_equal(wide[..., 5:16], want)
    assert (wide[..., :5] == 7.0).all() and (wide[..., 16:] == 7.0).all()
    uneven = np.zeros((2, 10, 15, 11), np.float32)[:, :, 1:, :]    # pixels evenly spaced, rows not: still right
    (got,) = run([x], [uneven])
    np.testing.assert_array_equal(uneven, want)


def _neck(attrs: dict, reread: bool, values=None):
    """An FPN-style merge at batch 2: a 1x1 Conv of the coarse map x (13 -> 11 channels) resized x2, beside a
    padded 3x3 Conv of the fine map f (7 -> 9), concatenated and mixed by a 1x1 Conv; ``reread``: the resized
    map is also read by a second 1x1 Conv (a second output), which takes no strided view: the Resize keeps its
    buffer."""
    rng = np.random.default_rng(2)
    values = values or {"wl": rng.standard_normal((11, 13, 1, 1)) * 0.3, "bl": rng.standard_normal(11),
                        "wf": rng.standard_normal((9, 7, 3, 3)) * 0.2, "bf": rng.standard_normal(9),
                        "wo": rng.standard_normal((5, 20, 1, 1)) * 0.3, "wz": rng.standard_normal((3, 11, 1, 1))}
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in values.items()]
    inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"))
    nodes = [helper.make_node("Conv", ["x", "wl", "bl"], ["l"]),
             helper.make_node("Resize", ["l", "", "scales"], ["up"], **attrs),
             helper.make_node("Conv", ["f", "wf", "bf"], ["lat"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["up", "lat"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "wo"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if reread:
        nodes.append(helper.make_node("Conv", ["up", "wz"], ["z"]))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "neck", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 13, 6, 5)),
                                              helper.make_tensor_value_info("f", TensorProto.FLOAT, (2, 7, 12, 10))],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), values


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("reread", [False, True], ids=["placed", "resize-read-twice"])
@pytest.mark.parametrize("attrs", [NEAREST, BILINEAR], ids=["nearest", "bilinear"])
def test_an_upsampled_map_is_written_into_its_concat(concat_copies, attrs, reread, threads):
    copied = concat_copies
    model, values = _neck(attrs, reread)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 13, 6, 5)).astype(np.float32),
             "f": rng.standard_normal((2, 7, 12, 10)).astype(np.float32)}
    with nnhal.Session(model, devices=["cpu"], num_thread=threads) as s:
        got = s.run(feeds)
        (plan,) = [sg.device_graph for sg in s.graph.execution.subgraphs]
    kernels = {st.node.outputs[0]: st.kernel_name for st in plan.steps}
    assert kernels["up"] == "nhwc-native"
    if reread:
        assert "up" not in plan.memory.strides and "up" in copied
    else:
        assert plan.memory.tensors["up"].root == "cat" and "up" in plan.memory.strides and "up" not in copied
    want = _ort(model, feeds)
    # the longest chain of roundings: 13 products (+ bias) and 4 resize taps, then 20 products
    magnitude = _ort(_neck(attrs, reread, {k: np.abs(v) for k, v in values.items()})[0],
                     {k: np.abs(v) for k, v in feeds.items()})
    for g, w, m in zip(got, want, magnitude):
        assert_within_bound(g, w, 2 * gamma(14 + 4 + 20 + 1) * m)


def test_dbnet_style_levels_are_all_written_into_one_concat(concat_copies):
    """Four levels of 6 channels at 1/1, 1/2, 1/4, 1/8 scale, the coarser three resized (nearest) to the finest:
    every Resize writes its slice; the finest (a Conv) too; the Concat copies nothing."""
    copied = concat_copies
    rng = np.random.default_rng(6)
    inits, nodes, ins = [], [], []
    for k, side in enumerate((16, 8, 4, 2)):
        ins.append(helper.make_tensor_value_info(f"p{k}", TensorProto.FLOAT, (2, 5, side, side)))
        inits.append(numpy_helper.from_array((rng.standard_normal((6, 5, 1, 1)) * 0.4).astype(np.float32), f"w{k}"))
        nodes.append(helper.make_node("Conv", [f"p{k}", f"w{k}"], [f"c{k}"]))
        if k:
            inits.append(numpy_helper.from_array(np.array([1, 1, 2 ** k, 2 ** k], np.float32), f"s{k}"))
            nodes.append(helper.make_node("Resize", [f"c{k}", "", f"s{k}"], [f"u{k}"], **NEAREST))
    nodes.append(helper.make_node("Concat", ["c0", "u1", "u2", "u3"], ["cat"], axis=1))
    inits.append(numpy_helper.from_array((rng.standard_normal((3, 24, 1, 1)) * 0.2).astype(np.float32), "wo"))
    nodes.append(helper.make_node("Conv", ["cat", "wo"], ["y"]))
    graph = helper.make_graph(nodes, "levels", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {f"p{k}": rng.standard_normal((2, 5, s, s)).astype(np.float32) for k, s in enumerate((16, 8, 4, 2))}
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = s.run(feeds)[0]
        (plan,) = [sg.device_graph for sg in s.graph.execution.subgraphs]
    assert {"u1", "u2", "u3"} <= set(plan.memory.strides)
    assert copied == []
    want = _ort(model, feeds)[0]
    abs_model = helper.make_model(helper.make_graph(
        nodes, "levels", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.abs(numpy_helper.to_array(t)), t.name) for t in inits]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    magnitude = _ort(abs_model, {k: np.abs(v) for k, v in feeds.items()})[0]
    assert_within_bound(got, want, 2 * gamma(5 + 24 + 1) * magnitude)
