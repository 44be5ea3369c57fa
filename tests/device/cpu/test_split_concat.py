"""A Concat of every part of one Split reads the Split's input instead (split_concat.merge_split_parts), which
the planner then places inside the Concat's output: the convolution writes it there, the Split reads it through
the pixel stride (SplitRows.strided_input) and the Concat copies only the bottleneck's part. The cases that keep
a copy: the Split's input is a graph input, or is read by another step that cannot read a strided view; the
cases that keep the Split's parts: the parts out of order, or split along another axis. Both plan paths, one
and two threads, against onnxruntime within the rigorous bound of the reordered sums."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.conformance.tolerance import assert_within_bound, gamma
from nnhal.device.cpu import native
from nnhal.device.cpu.kernels.split import pitched_rows

ort = pytest.importorskip("onnxruntime")

SHAPE = (1, 8, 12, 10)
TAPS = 8 + 16 * 9 + 2           # the 1x1 Conv's sum, the 3x3 Conv's over one half, the biases and the Add


def _model(case: str, weights=None):
    """x -> 1x1 Conv (8 -> 32) -> c, Split c into halves s0 and s1 along the channels, a 3x3 Conv of s1 plus
    s1 (a C2f bottleneck) -> a, Concat(s0, s1, a) -> 1x1 MaxPool (keeps the Concat channels-last) -> y.
    ``case``: "c2f" as above; "input": the Split reads the graph input (32 channels) instead of c; "reread":
    c is also read by a 3x3 MaxPool (a second output), which copies a strided input; "swapped":
    Concat(s1, s0, a); "s0-read": s0 is also read by that MaxPool."""
    rng = np.random.default_rng(3)
    values = weights or {"w1": rng.standard_normal((32, 8, 1, 1)) * 0.3, "b1": rng.standard_normal(32),
                         "w2": rng.standard_normal((16, 16, 3, 3)) * 0.1, "b2": rng.standard_normal(16)}
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in values.items()]
    source = "x" if case == "input" else "c"
    axis = 1
    parts = ["s1", "s0"] if case == "swapped" else ["s0", "s1"]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"]),
             helper.make_node("Split", [source], ["s0", "s1"], axis=axis, num_outputs=2),
             helper.make_node("Conv", ["s1", "w2", "b2"], ["t"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["t", "s1"], ["a"]),
             helper.make_node("Concat", [*parts, "a"], ["cat"], axis=axis),
             helper.make_node("MaxPool", ["cat"], ["y"], kernel_shape=[1, 1])]
    c_in = 32 if case == "input" else 8
    if case == "input":
        del nodes[0]
        values = {k: v for k, v in values.items() if k not in ("w1", "b1")}
        inits = [i for i in inits if i.name not in ("w1", "b1")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if case in ("reread", "s0-read"):
        nodes.append(helper.make_node("MaxPool", ["c" if case == "reread" else "s0"], ["r"], kernel_shape=[3, 3]))
        outputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, None))
    shape = (1, c_in, 12, 10)
    graph = helper.make_graph(nodes, "split_concat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    return model, values, shape


@pytest.fixture(params=["straight", "checked"])
def plan_path(request, monkeypatch):
    monkeypatch.setenv("NNHAL_CHECK", "1" if request.param == "checked" else "0")
    return request.param


def _run(case, threads, copied):
    """Two runs of one session on two inputs (the Split's strided view is made on the first and kept), each
    against onnxruntime; the plan, its Concat and Split steps and the inputs the Concat copied (``copied``: the
    concat_copies fixture)."""
    model, values, shape = _model(case)
    xs = [np.random.default_rng(seed).standard_normal(shape).astype(np.float32) for seed in (0, 1)]
    oracle = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    magnitude_model, _, _ = _model(case, {k: np.abs(v) for k, v in values.items()})
    with nnhal.Session(model, devices=["cpu"], num_thread=threads) as s:
        for x in xs:
            got = s.run({"x": x})
            magnitude = ReferenceEvaluator(magnitude_model).run(None, {"x": np.abs(x)})
            for g, w, m in zip(got, oracle.run(None, {"x": x}), magnitude):
                assert_within_bound(g, w, 2 * gamma(TAPS) * m)
        (plan,) = [sg.device_graph for sg in s.graph.execution.subgraphs]
    half = len(copied) // 2
    assert copied[:half] == copied[half:]             # the second run copies what the first did
    del copied[half:]
    (concat,) = [st for st in plan.steps if st.node.op_type == "Concat"]
    (split,) = [st for st in plan.steps if st.node.op_type == "Split"]
    return plan, concat, split, copied


@pytest.mark.skipif(not native.available(), reason="the row copies are native")
@pytest.mark.parametrize("threads", [1, 2])
def test_c2f_concat_reads_the_convolution_in_place(plan_path, concat_copies, threads):
    plan, concat, split, copied = _run("c2f", threads, concat_copies)
    assert concat.node.inputs == ["c", "a"]
    assert split.node.outputs == ["", "s1"] and split.kernel_name == "native"
    assert set(plan.memory.strides) == {"c"}
    assert plan.memory.tensors["c"].root == concat.node.outputs[0]
    assert copied == ["a"]


@pytest.mark.skipif(not native.available(), reason="the row copies are native")
@pytest.mark.parametrize("case, inputs, parts, placed, copies", [
    # a graph input: copied by the Concat (the layout pass keeps this graph NCHW: a is a block of the output)
    ("input", ["x", "a"], ["", "s1"], set(), ["x"]),
    # the MaxPool reads c too, from no strided view: copied
    ("reread", ["c", "a"], ["", "s1"], set(), ["c", "a"]),
    # not the Split's input in order: the parts stay
    ("swapped", ["s1", "s0", "a"], ["s0", "s1"], set(), ["s1", "s0", "a"]),
    # a part read elsewhere: still produced by the Split, c still placed
    ("s0-read", ["c", "a"], ["s0", "s1"], {"c"}, ["a"]),
])
def test_cases_that_keep_a_copy(plan_path, concat_copies, case, inputs, parts, placed, copies):
    plan, concat, split, copied = _run(case, 2, concat_copies)
    assert concat.node.inputs == inputs
    assert split.node.outputs == parts
    assert set(plan.memory.strides) == placed
    assert copied == copies


def test_pitched_rows_reads_a_channel_slice():
    """The bytes of a channel slice of a wider NHWC tensor and its row pitch; other layouts get None."""
    wide = np.arange(2 * 3 * 4 * 10, dtype=np.float32).reshape(2, 3, 4, 10)
    part = wide[..., 2:6]
    flat, pitch = pitched_rows(part, 3)
    assert pitch == 40 and flat.flags.c_contiguous
    rows = flat.view(np.float32)
    got = np.stack([rows[r * 10:r * 10 + 4] for r in range(24)]).reshape(part.shape)
    np.testing.assert_array_equal(got, part)
    assert pitched_rows(wide[:, ::2, :, 2:6], 3)[0] is None        # rows not evenly spaced
    assert pitched_rows(wide[..., ::2], 3)[0] is None               # channels not contiguous
    assert pitched_rows(part, 2)[0] is None                         # not a split of the last axis
