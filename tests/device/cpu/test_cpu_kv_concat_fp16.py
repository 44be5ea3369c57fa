"""fp16 storage's roundings around a KV-cache Concat (device/cpu/castfuse.py fuse_rounded_concats): the Concat
of the past cache and the new row writes the present output itself and rounds it once (ConcatRounded), with no
Cast step left at the past's entry or the present's exit. On both plan paths: the present is bit-equal to the
plan without the fusion (round(concat(round(past), new)) = round(concat(past, new))), its past part is the past
rounded to float16, and the scores that read it are within fp16's tolerance of onnx.reference in float32."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.conformance.tolerance import compare, policy
from nnhal.device.cpu import plan

RNG = np.random.default_rng(37)


def _step_model(heads: int, past_len: int, depth: int, present_out: bool = True) -> onnx.ModelProto:
    """One attention step's key path: k = x @ W split into heads, present = Concat(past, k) on the time axis,
    scores = q @ present^T; ``present_out``: present leaves the graph (else only scores do)."""
    dim = heads * depth
    w = (RNG.standard_normal((dim, dim)) / np.sqrt(dim)).astype(np.float32)
    q = RNG.standard_normal((1, heads, 1, depth)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["k"], name="proj"),
        helper.make_node("Reshape", ["k", "split"], ["k4"], name="heads"),
        helper.make_node("Transpose", ["k4"], ["kh"], perm=[0, 2, 1, 3], name="to_heads"),
        helper.make_node("Concat", ["past", "kh"], ["present"], axis=2, name="cache"),
        helper.make_node("Transpose", ["present"], ["kt"], perm=[0, 1, 3, 2], name="keys_t"),
        helper.make_node("MatMul", ["q", "kt"], ["scores"], name="scores"),
    ]
    outputs = [helper.make_tensor_value_info("scores", TensorProto.FLOAT, None)]
    if present_out:
        outputs.append(helper.make_tensor_value_info("present", TensorProto.FLOAT, None))
    graph = helper.make_graph(
        nodes, "kv_step",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, dim]),
         helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, heads, past_len, depth])],
        outputs,
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(q, "q"),
         numpy_helper.from_array(np.array([1, 1, heads, depth], np.int64), "split")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    return {name: RNG.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def _run(model, feeds, monkeypatch, fused: bool = True) -> list[tuple[list[np.ndarray], list[str]]]:
    """(outputs, kernel names) on the interpreting and the straight-line path."""
    if not fused:
        monkeypatch.setattr(plan, "fuse_rounded_concats", lambda chosen, *_: chosen)
    results = []
    for check in ("1", "0"):
        monkeypatch.setenv("NNHAL_CHECK", check)
        with nnhal.Session(model, devices=["cpu"], num_thread=1, precision="fp16") as s:
            outs = s.run(feeds)
            kernels = [f"{n.op}/{n.kernel}" for n in s.profile(feeds, runs=1).nodes]
            results.append((outs, kernels))
    monkeypatch.undo()
    return results


def _half(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).astype(np.float32)


@pytest.mark.parametrize("heads, past_len, depth", [(4, 64, 64), (2, 7, 8), (1, 300, 16)])
def test_present_rounded_once_and_bit_equal(heads, past_len, depth, monkeypatch):
    model = _step_model(heads, past_len, depth)
    feeds = _feeds(model)
    expected = ReferenceEvaluator(model).run(None, feeds)
    unfused = _run(model, feeds, monkeypatch, fused=False)
    for (outs, kernels), (before, before_kernels) in zip(_run(model, feeds, monkeypatch), unfused):
        scores, present = outs
        # the roundings of x (in) and of the scores (out) stay; those of the past (in) and the present (out) go
        assert "Concat/native, rounded" in kernels and "Concat/native, rounded" not in before_kernels
        assert [k for k in kernels if k.startswith("Cast")] == ["Cast/round-half"] * 2
        assert [k for k in before_kernels if k.startswith("Cast")] == ["Cast/round-half"] * 4
        np.testing.assert_array_equal(present, before[1])
        np.testing.assert_array_equal(present[:, :, :past_len], _half(feeds["past"]))
        np.testing.assert_array_equal(present, _half(present))
        for got, want in ((present, expected[1]), (scores, expected[0])):
            why = compare(got, want, policy("fp16"))
            assert why is None, why


def test_not_fused_without_a_rounded_output(monkeypatch):
    """The Concat's output stays inside (no present output): its new row is not rounded."""
    model = _step_model(2, 5, 8, present_out=False)
    feeds = _feeds(model)
    expected = ReferenceEvaluator(model).run(None, feeds)
    for outs, kernels in _run(model, feeds, monkeypatch):
        assert "Concat/native, rounded" not in kernels
        why = compare(outs[0], expected[0], policy("fp16"))
        assert why is None, why


def test_fp32_untouched(monkeypatch):
    model = _step_model(4, 16, 8)
    feeds = _feeds(model)
    expected = ReferenceEvaluator(model).run(None, feeds)
    for check in ("1", "0"):
        monkeypatch.setenv("NNHAL_CHECK", check)
        with nnhal.Session(model, devices=["cpu"], num_thread=1) as s:
            scores, present = s.run(feeds)
            assert all(n.kernel != "native, rounded" for n in s.profile(feeds, runs=1).nodes)
        np.testing.assert_array_equal(present[:, :, :16], feeds["past"])
        for got, want in ((present, expected[1]), (scores, expected[0])):     # MatMuls: any summation order
            why = compare(got, want, policy("fp32", case_rtol=1e-4))
            assert why is None, why


def test_detector_head_concat_output_rounded(monkeypatch):
    """A detector head's channel Concat after a channels-last region (the two heads' convolutions write NCHW
    for it, the stem reads the NCHW input: the direct kernel's channels-first sides) whose output leaves the
    graph: the Concat rounds it, the output holds float16 values within fp16's tolerance of the reference."""
    def weight(*shape):
        return (RNG.standard_normal(shape) * 0.2).astype(np.float32)

    weights = {"w0": weight(16, 3, 3, 3), "w1": weight(16, 16, 3, 3), "wa": weight(8, 16, 1, 1),
               "wb": weight(4, 16, 1, 1)}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1], name="stem"),
             helper.make_node("Relu", ["c0"], ["r0"], name="stem_relu"),
             helper.make_node("Conv", ["r0", "w1"], ["c1"], pads=[1, 1, 1, 1], name="body"),
             helper.make_node("Relu", ["c1"], ["r1"], name="body_relu"),
             helper.make_node("Conv", ["r1", "wa"], ["a"], name="box"),
             helper.make_node("Conv", ["r1", "wb"], ["b"], name="cls"),
             helper.make_node("Sigmoid", ["b"], ["bs"], name="cls_sigmoid"),
             helper.make_node("Concat", ["a", "bs"], ["y"], axis=1, name="head")]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = _feeds(model)
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    for (y,), kernels in _run(model, feeds, monkeypatch):
        assert "Concat/native, rounded" in kernels and "Conv/direct-nchw-in" in kernels
        np.testing.assert_array_equal(y, _half(y))
        why = compare(y, expected, policy("fp16"))
        assert why is None, why
