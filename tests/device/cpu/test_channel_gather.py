"""Channel selections in channels-last regions (device/cpu/channel_gather.py): ShuffleNet v2's Concat -> channel
shuffle -> two channel Slices (which the movement pass folds into row gathers of the NCHW storage) and plain
channel Slices become one Gather of the channel axis, which the layout pass keeps NHWC. The graphs use only
exact ops (MaxPool, Concat, moves), so the result is bit-equal to onnxruntime on both plan paths."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import native
from nnhal.device.cpu.channel_gather import channel_selection

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")


def _shuffle_block(c1: int, c2: int, groups: int, cut: int, step: int = 1, shuffle: bool = True):
    """MaxPool of x (c1 channels) and of y (c2 channels) -> Concat -> channel shuffle in ``groups`` groups (a
    Reshape -> Transpose -> Reshape) -> Slice [0, cut) and [cut, C) step ``step`` of the channels -> a MaxPool
    of each part, plus a MaxPool of a Slice of rows (not channels) of x, which must stay a Slice."""
    c = c1 + c2

    def ints(name, values):
        return numpy_helper.from_array(np.asarray(values, np.int64), name)

    pool = {"kernel_shape": [2, 2], "pads": [0, 0, 1, 1]}
    nodes = [helper.make_node("MaxPool", ["x"], ["px"], **pool),
             helper.make_node("MaxPool", ["y"], ["py"], **pool),
             helper.make_node("Concat", ["px", "py"], ["cat"], axis=1)]
    inits = [ints("s0", [0]), ints("s1", [cut]), ints("s2", [c]), ints("ax", [1]), ints("st", [step]),
             ints("r0", [1]), ints("r1", [5]), ints("ax2", [2])]
    src = "cat"
    if shuffle:
        inits += [ints("shape5", [1, groups, c // groups, 9, 7]), ints("shape4", [1, c, 9, 7])]
        nodes += [helper.make_node("Reshape", ["cat", "shape5"], ["r5"]),
                  helper.make_node("Transpose", ["r5"], ["t5"], perm=[0, 2, 1, 3, 4]),
                  helper.make_node("Reshape", ["t5", "shape4"], ["shuf"])]
        src = "shuf"
    nodes += [helper.make_node("Slice", [src, "s0", "s1", "ax", "st"], ["a"]),
              helper.make_node("Slice", [src, "s1", "s2", "ax"], ["b"]),
              helper.make_node("Slice", ["x", "r0", "r1", "ax2"], ["rows"]),
              helper.make_node("MaxPool", ["a"], ["ya"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
              helper.make_node("MaxPool", ["b"], ["yb"], kernel_shape=[2, 2], strides=[2, 2]),
              helper.make_node("MaxPool", ["rows"], ["yr"], kernel_shape=[1, 1])]
    graph = helper.make_graph(
        nodes, "shuffle_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, c1, 9, 7)),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, c2, 9, 7))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("ya", "yb", "yr")], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("checked", [False, True], ids=["generated", "checked"])
@pytest.mark.parametrize("c1,c2,groups,cut,step,shuffle", [
    (6, 6, 2, 6, 1, True),          # ShuffleNet v2's halves
    (5, 7, 3, 5, 1, True),          # odd channel counts, three groups
    (8, 4, 4, 3, 2, True),          # four groups, an uneven cut and a step
    (3, 6, 3, 4, 1, False),         # plain channel Slices
])
def test_channel_selections_stay_channels_last_and_move_bits_exactly(monkeypatch, checked, c1, c2, groups, cut,
                                                                     step, shuffle):
    if checked:
        monkeypatch.setenv("NNHAL_CHECK", "1")
    model = _shuffle_block(c1, c2, groups, cut, step, shuffle)
    rng = np.random.default_rng(c1 * 10 + c2)
    feeds = {"x": rng.standard_normal((1, c1, 9, 7)).astype(np.float32),
             "y": rng.standard_normal((1, c2, 9, 7)).astype(np.float32)}
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run(feeds)
        steps = [st for sg in s.graph.execution.subgraphs for st in sg.device_graph.steps]
    gathers = [st for st in steps if st.node.op_type == "Gather"]
    assert len(gathers) == 2 and all(st.node.attrs["axis"] == 3 for st in gathers), [st.node for st in gathers]
    assert [st.node.op_type for st in steps].count("Slice") == 1
    # the Concat and both channel parts stay NHWC: conversions only of the inputs and the graph outputs
    relayouts = sorted(st.node.inputs[0].split("#")[0] for st in steps if st.kernel_name in ("to-nhwc", "to-nchw"))
    assert relayouts == ["x", "y", "ya", "yb"], relayouts
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("shape", [(1, 6, 3, 4), (2, 5, 2, 3)])
def test_channel_selection_recognises_only_whole_channels(shape):
    n, c, h, w = shape
    base = np.arange(n * c * h * w).reshape(shape)
    p = np.array([c - 1, 0, 2, 2])
    np.testing.assert_array_equal(channel_selection(base[:, p], shape), p)
    assert channel_selection(base[:, :, ::-1], shape) is None           # rows moved inside each channel
    assert channel_selection(base[:, :2, :, :w - 1], shape) is None      # a crop


def test_a_batch_entry_moved_is_not_a_channel_selection():
    base = np.arange(2 * 3 * 2 * 2).reshape(2, 3, 2, 2)
    assert channel_selection(base[::-1], base.shape) is None


def _v2_block(c: int):
    """ShuffleNet v2's block: Concat -> shuffle (2 groups) -> halves; one half through a MaxPool, then the
    untouched half and that concatenated again (the untouched half's Gather writes straight into it)."""
    model = _shuffle_block(c, c, 2, c)
    g = model.graph
    for node in g.node:
        if node.output[0] == "ya":
            node.input[0] = "z"
    g.node.insert(len(g.node) - 3, helper.make_node("MaxPool", ["b"], ["bp"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    g.node.insert(len(g.node) - 3, helper.make_node("Concat", ["a", "bp"], ["z"], axis=1))
    return model


@pytest.mark.parametrize("checked", [False, True], ids=["generated", "checked"])
@pytest.mark.parametrize("c", [6, 7])
def test_the_untouched_half_is_gathered_straight_into_the_next_concat(monkeypatch, checked, c):
    if checked:
        monkeypatch.setenv("NNHAL_CHECK", "1")
    model = _v2_block(c)
    rng = np.random.default_rng(c)
    feeds = {"x": rng.standard_normal((1, c, 9, 7)).astype(np.float32),
             "y": rng.standard_normal((1, c, 9, 7)).astype(np.float32)}
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run(feeds)
        plans = [sg.device_graph for sg in s.graph.execution.subgraphs]
    if native.available():
        assert any("a" in p.memory.strides for p in plans)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.skipif(not native.available(), reason=f"native kernels not loaded: {native.status().reason}")
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_gather_last_writes_a_channel_slice_of_a_wider_tensor(dtype):
    x = np.arange(5 * 4 * 9, dtype=dtype).reshape(5, 4, 9)
    idx = np.array([8, 0, 3, 3, 1], np.int32)
    wide = np.full((5, 4, 12), -1, dtype)
    native.gather_last(x, wide[..., 2:7], idx, 0, 20)
    np.testing.assert_array_equal(wide[..., 2:7], x[..., idx])
    assert np.all(wide[..., :2] == -1) and np.all(wide[..., 7:] == -1)
    with pytest.raises(ValueError):
        native.gather_last(x, np.zeros((5, 5, 12), dtype)[:, 1:, 2:7], idx, 0, 20)      # pixels unevenly spaced
    with pytest.raises(ValueError):
        native.gather_last(x, x[..., :5], idx, 0, 20)                                    # overlaps x
