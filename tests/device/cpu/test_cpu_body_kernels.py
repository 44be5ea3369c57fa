"""The small ops of recurrent bodies as views on the cpu device (kernels/gather.py GatherScalarRow,
kernels/transpose.py TransposeReshape, kernels/split.py SplitView), and Loop/Scan bodies made of them, against
onnxruntime."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import native
from nnhal.device.cpu.kernels import select
from nnhal.graph.node import Node
from nnhal.operator.base import Info
from tests.conftest import make_model, vinfo
from tests.device.cpu.test_cpu_control_flow import runners


def kernels(session) -> dict[str, str]:
    """node name -> kernel of the session's cpu plans."""
    return {k: v for sg in session.graph.execution.subgraphs if sg.device == "cpu"
            for k, v in sg.device_graph.kernels.items()}


def ort_run(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("index", [0, 3, -1, -5])
def test_gather_by_a_scalar_index_is_a_view_of_the_row(index):
    model = make_model([helper.make_node("Gather", ["x", "i"], ["g"], axis=0, name="pick"),
                        helper.make_node("Relu", ["g"], ["y"])],
                       [vinfo("x", [5, 2, 3]), vinfo("i", [], TensorProto.INT64)], [vinfo("y", [2, 3])])
    x = np.random.default_rng(0).standard_normal((5, 2, 3)).astype(np.float32)
    feeds = {"x": x, "i": np.array(index, np.int64)}
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run(feeds)[0]
        assert kernels(s)["pick"] == "row-view"
    np.testing.assert_array_equal(got, ort_run(model, feeds)[0])
    np.testing.assert_array_equal(x, feeds["x"])               # the view was not written through


def test_gather_by_a_scalar_index_out_of_range_names_the_node():
    model = make_model([helper.make_node("Gather", ["x", "i"], ["y"], axis=0, name="the_pick")],
                       [vinfo("x", [5, 3]), vinfo("i", [], TensorProto.INT64)], [vinfo("y", [3])])
    with nnhal.Session(model, devices=["cpu"]) as s:
        with pytest.raises(nnhal.NnhalError, match="the_pick"):
            s.run({"x": np.zeros((5, 3), np.float32), "i": np.array(5, np.int64)})


@pytest.mark.parametrize("shape, perm, kernel", [
    ((1, 1, 40), (1, 0, 2), "reshape"), ((4, 1, 6), (1, 0, 2), "reshape"), ((1, 3, 1, 5), (2, 0, 1, 3), "reshape"),
    # swaps of two axis groups go to the native tiled transpose (kernels/transpose.py) when it is built
    ((1, 3, 1, 5), (2, 0, 3, 1), "swap" if native.available() else "reference"),
    ((2, 3, 8), (1, 0, 2), "swap" if native.available() else "rows")])
def test_transpose_of_unit_axes_is_a_reshape(shape, perm, kernel):
    """Chosen by the cpu device's select (the graph passes already turn such Transposes into Reshapes in a main
    graph; bodies keep them), and the same values as numpy's transpose."""
    out = tuple(shape[p] for p in perm)
    node = Node("tr", "Transpose", ["x"], ["t"], {"perm": list(perm)}, opset=17, version=13)
    ins, outs = [Info(np.dtype(np.float32), shape)], [Info(np.dtype(np.float32), out)]
    chosen = select(node, ins, outs)
    assert chosen.name == kernel
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    buf = None if chosen.view else np.empty(out, np.float32)
    got = chosen.prepare(node, ins, outs)([x], [buf])[0]
    np.testing.assert_array_equal(got, np.transpose(x, perm))
    if chosen.view:
        assert np.shares_memory(got, x)


@pytest.mark.parametrize("shape, axis, parts, kernel", [((1, 12), 1, 3, "view"), ((1, 1, 6, 2), 2, 2, "view"),
                                                        ((2, 6), 1, 3, "static"), ((1, 7), 1, None, "static")])
def test_split_into_equal_blocks_is_views(shape, axis, parts, kernel):
    """Equal contiguous parts are views; each part is then consumed in place where its input dies."""
    if parts is None:
        split = numpy_helper.from_array(np.array([3, 4], np.int64), "split")
        node = helper.make_node("Split", ["x", "split"], ["p0", "p1"], axis=axis, name="sp")
        names, inits = ["p0", "p1"], [split]
    else:
        names, inits = [f"p{k}" for k in range(parts)], []
        node = helper.make_node("Split", ["x"], names, axis=axis, name="sp", num_outputs=parts)
    ops = [helper.make_node("Sigmoid", [n], [f"s{k}"]) for k, n in enumerate(names)]
    model = make_model([helper.make_node("Exp", ["x_in"], ["x"]), node] + ops, [vinfo("x_in", list(shape))],
                       [vinfo(f"s{k}", [None] * len(shape)) for k in range(len(names))], inits, opset=18)
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run({"x_in": x})
        assert kernels(s)["sp"] == kernel
    for g, w in zip(got, ort_run(model, {"x_in": x})):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


def stream_model(trips: int):
    """A streaming Loop as exporters write it: Gather(frames, i), a unit-axes Transpose, an equal Split, gates,
    the state carried and a scan output per step."""
    w = numpy_helper.from_array(np.random.default_rng(3).standard_normal((4, 12)).astype(np.float32) * 0.5, "w")
    body_nodes = [
        helper.make_node("Gather", ["frames", "i"], ["f"], axis=0),          # (1, 1, 4)
        helper.make_node("Transpose", ["f"], ["ft"], perm=[1, 0, 2]),
        helper.make_node("Reshape", ["ft", "shape2"], ["f2"]),                # (1, 4)
        helper.make_node("MatMul", ["f2", "w"], ["proj"]),                    # (1, 12)
        helper.make_node("Split", ["proj"], ["a", "b", "cc"], axis=1, num_outputs=3),
        helper.make_node("Sigmoid", ["a"], ["ga"]),
        helper.make_node("Tanh", ["b"], ["gb"]),
        helper.make_node("Mul", ["ga", "h_in"], ["gm"]),
        helper.make_node("Add", ["gm", "gb"], ["h_out"]),
        helper.make_node("Sub", ["h_out", "cc"], ["y_out"]),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ]
    shape2 = numpy_helper.from_array(np.array([1, 4], np.int64), "shape2")
    body = helper.make_graph(body_nodes, "body",
                             [vinfo("i", [], TensorProto.INT64), vinfo("cond_in", [], TensorProto.BOOL),
                              vinfo("h_in", [1, 4])],
                             [vinfo("cond_out", [], TensorProto.BOOL), vinfo("h_out", [1, 4]), vinfo("y_out", [1, 4])],
                             [shape2])
    inits = [w, numpy_helper.from_array(np.array(trips, np.int64), "m"), numpy_helper.from_array(np.array(True), "c")]
    return make_model([helper.make_node("Loop", ["m", "c", "h0"], ["hn", "ys"], body=body, name="loop")],
                      [vinfo("frames", [trips, 1, 1, 4]), vinfo("h0", [1, 4])],
                      [vinfo("hn", [1, 4]), vinfo("ys", [trips, 1, 4])], inits, opset=18)


def test_a_streaming_loop_body_matches_onnxruntime():
    trips = 9
    rng = np.random.default_rng(4)
    feeds = {"frames": rng.standard_normal((trips, 1, 1, 4)).astype(np.float32),
             "h0": rng.standard_normal((1, 4)).astype(np.float32)}
    model = stream_model(trips)
    want = ort_run(model, feeds)
    with nnhal.Session(model, devices=["cpu"]) as s:
        first = s.run(feeds)
        again = s.run(feeds)
        (runner,) = runners(s)
        (plan,) = runner.cache.values()
        chosen = {name.split("_")[0]: k for name, k in plan.kernels.items()}
        assert (chosen["Gather"], chosen["Transpose"], chosen["Split"]) == ("row-view", "reshape", "view")
        assert sum(p.steps for c in plan.chunks for p in c.programs) >= 4      # the gates: one native program
    for g, a, w in zip(first, again, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(g, a)
    assert not np.shares_memory(first[1], again[1])       # the stacked scan output is fresh per run


@pytest.mark.parametrize("axis, reverse", [(0, False), (0, True), (1, False), (1, True)])
def test_scan_slices_by_axis_and_direction(axis, reverse):
    """Scan's per-step slice: a view on axis 0, a copy on others, forwards and backwards."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Mul", ["s_out", "x_t"], ["y_t"])],
        "body", [vinfo("s_in", [3]), vinfo("x_t", [3])], [vinfo("s_out", [3]), vinfo("y_t", [3])])
    xs_shape = [5, 3] if axis == 0 else [3, 5]
    node = helper.make_node("Scan", ["s0", "xs"], ["sn", "ys"], body=body, num_scan_inputs=1,
                            scan_input_axes=[axis], scan_input_directions=[int(reverse)])
    model = make_model([node], [vinfo("s0", [3]), vinfo("xs", xs_shape)], [vinfo("sn", [3]), vinfo("ys", [5, 3])])
    rng = np.random.default_rng(5)
    feeds = {"s0": rng.standard_normal(3).astype(np.float32), "xs": rng.standard_normal(xs_shape).astype(np.float32)}
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run(feeds)
    for g, w in zip(got, ort_run(model, feeds)):
        np.testing.assert_array_equal(g, w)
