"""Concat on the cpu device's native row copy (device/cpu/kernels/concat.py, native/nn_concat.h): the kernel against
numpy's concatenate, and whole graphs whose Concats run it (channels-last regions, inputs shared with other
readers or leaving the graph, one tensor twice) against onnxruntime, on the interpreting and the generated plan
paths."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import native
from nnhal.device.cpu.kernels.concat import ConcatNative
from nnhal.graph.node import Node
from nnhal.operator.base import Info

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")
needs_native = pytest.mark.skipif(not native.available(), reason=f"native kernels not loaded: {native.status().reason}")


def _prepare(shapes, axis, dtype):
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    ins = [Info(np.dtype(dtype), tuple(s)) for s in shapes]
    outs = [Info(np.dtype(dtype), tuple(out))]
    node = Node("cat", "Concat", [f"x{k}" for k in range(len(shapes))], ["y"], {"axis": axis}, opset=13, version=13)
    kernel = ConcatNative()
    return kernel.score(node, ins, outs), kernel.prepare(node, ins, outs), tuple(out)


@needs_native
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.uint8])
@pytest.mark.parametrize("shapes,axis", [
    ([(1, 17, 9, 24), (1, 17, 9, 7), (1, 17, 9, 1)], 3),       # channels-last channels, odd counts
    ([(1, 24, 17, 9), (1, 7, 17, 9)], 1),                       # one block per input (batch 1, NCHW)
    ([(5, 5, 96), (5, 0, 96), (5, 11, 96)], 1),                 # an empty input
    ([(2, 33, 64), (2, 33, 64)], -1),
    ([(64, 70), (64, 70)], 0),
])
def test_the_row_copy_is_numpys_concatenate(dtype, shapes, axis):
    rng = np.random.default_rng(0)
    xs = [(rng.standard_normal(s) * 50).astype(dtype) for s in shapes]
    score, run, shape = _prepare(shapes, axis % len(shapes[0]), dtype)
    assert score > 0
    out = np.full(shape, 7, dtype)
    (got,) = run(xs, [out])
    assert got is out
    np.testing.assert_array_equal(got, np.concatenate(xs, axis))
    # a non-contiguous input, no output buffer, a strided output buffer
    xs[0] = np.asfortranarray(xs[0])
    (got,) = run(xs, [None])
    np.testing.assert_array_equal(got, np.concatenate(xs, axis))
    wide = np.zeros(shape[:-1] + (shape[-1] + 3,), dtype)[..., 1:-2]
    (got,) = run(xs, [wide])
    assert got is wide
    np.testing.assert_array_equal(got, np.concatenate(xs, axis))


@needs_native
def test_an_input_already_placed_in_the_output_is_not_copied_again():
    shapes = [(1, 6, 6, 40), (1, 6, 6, 24)]
    _, run, shape = _prepare(shapes, 3, np.float32)
    out = np.zeros(shape, np.float32)
    placed = out[..., :40]                    # the view the planner gives a producer (plan.concat_slices)
    placed[...] = 1.0
    second = np.full(shapes[1], 2.0, np.float32)
    run([placed, second], [out])
    assert (out[..., :40] == 1.0).all() and (out[..., 40:] == 2.0).all()



@needs_native
def test_a_pair_found_in_place_is_remembered_and_other_pairs_are_still_checked(monkeypatch):
    """The kernel remembers which (input, output) arrays it found in place: the same arrays again copy nothing,
    while another input array, or the same input with another output, is checked and copied."""
    shapes = [(2, 5, 3, 40), (2, 5, 3, 24)]
    _, run, shape = _prepare(shapes, 3, np.float32)
    copies = []
    copy_rows = native.copy_rows
    monkeypatch.setattr(native, "copy_rows", lambda *a: copies.append(a[7]) or copy_rows(*a))
    out = np.zeros(shape, np.float32)
    placed = out[..., :40]
    placed[...] = 1.0
    second = np.full(shapes[1], 2.0, np.float32)
    for _ in range(3):
        run([placed, second], [out])
    assert copies == [40 * 4] * 3                           # only the second input, every run
    assert (out[..., :40] == 1.0).all() and (out[..., 40:] == 2.0).all()
    copies.clear()
    other = np.full(shapes[0], 3.0, np.float32)             # not in place: copied
    run([other, second], [out])
    assert copies == [0, 40 * 4] and (out[..., :40] == 3.0).all()
    copies.clear()
    elsewhere = np.zeros(shape, np.float32)                 # the remembered input, another output: copied there
    run([placed, second], [elsewhere])
    assert copies == [0, 40 * 4]
    np.testing.assert_array_equal(elsewhere, np.concatenate([placed, second], 3))
    shifted = out[..., 24:]                                  # a view of the output at the wrong offset: copied
    shifted_in = np.full(shapes[0], 5.0, np.float32)
    np.copyto(shifted, shifted_in)
    copies.clear()
    run([shifted, second], [elsewhere])
    assert copies == [0, 40 * 4] and (elsewhere[..., :40] == 5.0).all()

def test_small_concats_keep_the_reference_kernel():
    score, _, _ = _prepare([(1, 4, 2, 2), (1, 4, 2, 2)], 1, np.float32)
    assert score == 0


def _graph(variant):
    """Two convolutions (11 and 5 channels: odd counts) joined by a channel Concat inside a channels-last
    region, then a 1x1 Conv; the variants share a Concat input with another reader, let it leave the graph,
    or concatenate one tensor with itself and with a second Concat of it (two paths to one tensor)."""
    rng = np.random.default_rng(5)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "wb"], ["b"], pads=[1, 1, 1, 1])]
    inits = [w("wa", 11, 8, 3, 3), w("wb", 5, 8, 3, 3)]
    outputs = ["y"]
    if variant == "self":
        nodes += [helper.make_node("Concat", ["a", "b"], ["ab"], axis=1),
                  helper.make_node("Concat", ["ab", "a", "ab"], ["cat"], axis=1)]
        width = 16 + 11 + 16
    else:
        nodes.append(helper.make_node("Concat", ["a", "b"], ["cat"], axis=1))
        width = 16
    nodes.append(helper.make_node("Conv", ["cat", "wd"], ["y"]))
    inits.append(w("wd", 6, width, 1, 1))
    if variant == "shared":
        nodes.append(helper.make_node("Relu", ["b"], ["br"]))
        nodes.append(helper.make_node("Conv", ["br", "we"], ["z"]))
        inits.append(w("we", 3, 5, 1, 1))
        outputs.append("z")
    if variant == "output":
        outputs.append("a")
    graph = helper.make_graph(nodes, "concat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 8, 20, 20))],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@needs_native
@pytest.mark.parametrize("checked", [False, True], ids=["generated", "checked"])
@pytest.mark.parametrize("variant", ["plain", "shared", "output", "self"])
def test_graphs_whose_concats_run_natively_match_onnxruntime(monkeypatch, variant, checked):
    if checked:
        monkeypatch.setenv("NNHAL_CHECK", "1")
    model = _graph(variant)
    x = np.random.default_rng(1).standard_normal((1, 8, 20, 20)).astype(np.float32)
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run({"x": x})
        again = s.run({"x": x})
        steps = [st for sg in s.graph.execution.subgraphs for st in sg.device_graph.steps]
    assert {st.kernel_name for st in steps if st.node.op_type == "Concat"} == {"native"}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, a, w in zip(got, again, want):
        np.testing.assert_array_equal(g, a)
        # float32 convolutions of at most 72 terms: a few units of 2^-23 relative to the sum of |terms|
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(w).max())))
