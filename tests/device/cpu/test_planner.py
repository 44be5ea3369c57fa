"""The cpu device's memory planner (device/cpu/planner.py): buffers, views and in-place outputs."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu.planner import plan_memory
from tests.conftest import make_model, vinfo


def test_a_view_of_a_tensor_outside_the_arena_gets_no_buffer():
    """A view of a graph input is that input's memory: no buffer (it would only be a copy); a view of a planned
    tensor shares its buffer; nothing runs in place over a view of an input."""
    steps = [(["x"], ["v"], {}, {0: 0}),            # a view of the graph input
             (["v"], ["a"], {0: 0}, {}),            # element-wise, may run in place: not over the input
             (["a"], ["w"], {}, {0: 0}),            # a view of a planned tensor
             (["w"], ["y"], {}, {})]
    memory = plan_memory(steps, {"v": 64, "a": 64, "w": 64}, {"x", "y"})
    assert "v" not in memory.tensors and "v" not in memory.inplace
    assert memory.tensors["w"].root == "a" and memory.tensors["w"].offset == memory.tensors["a"].offset
    assert memory.arena_bytes == 64


def frame_loop_model(frames: int, features: int):
    """s = sum of the frames of ``x``, one row per iteration: the body's Gather of its frame is a view of the
    outer tensor ``x`` (kernel row-view)."""
    body = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["row"], axis=0, name="frame"),
         helper.make_node("Add", ["s_in", "row"], ["s_out"], name="acc"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [vinfo("i", [], TensorProto.INT64), vinfo("cond_in", [], TensorProto.BOOL), vinfo("s_in", [features])],
        [vinfo("cond_out", [], TensorProto.BOOL), vinfo("s_out", [features])])
    inits = [numpy_helper.from_array(np.array(frames, np.int64), "m"), numpy_helper.from_array(np.array(True), "c")]
    return make_model([helper.make_node("Loop", ["m", "c", "s0"], ["s"], body=body, name="loop")],
                      [vinfo("x", [frames, features]), vinfo("s0", [features])], [vinfo("s", [features])], inits)


def test_a_loop_bodys_frame_view_is_not_copied_per_iteration():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((7, 5)).astype(np.float32)
    s0 = rng.standard_normal(5).astype(np.float32)
    want = s0.copy()
    for row in x:                                   # the body's order of float32 additions
        want = want + row
    with nnhal.Session(frame_loop_model(7, 5), devices=["cpu"]) as s:
        for _ in range(2):
            np.testing.assert_array_equal(s.run({"x": x, "s0": s0})[0], want)
        (loop,) = [st for sg in s.graph.execution.subgraphs for st in sg.device_graph.steps
                   if st.node.op_type == "Loop"]
        cells = dict(zip(loop.run.__code__.co_freevars, loop.run.__closure__))
        (body,) = cells["runner"].cell_contents.cache.values()
        (gather,) = [st for st in body.steps if st.node.op_type == "Gather"]
        assert gather.kernel_name == "row-view" and gather.buffers == [None]
