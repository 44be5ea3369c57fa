"""Convolutions writing their channel slice of a channels-last Concat (plan.concat_slices with
ConvGemmNHWC.strided_output_for): the 1x1 GEMM, im2col and direct paths write straight into the Concat's output,
the depthwise one keeps its copy, a conv read by two ops is not placed; both plan paths, one and two threads and
the pools off, against onnx.reference within the rigorous bound of the reordered sums."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.conformance.tolerance import assert_within_bound, gamma, rounded_within
from nnhal.device.cpu import native
from nnhal.device.cpu.kernels import concat as concat_kernel

SHAPE = (2, 168, 11, 11)
# 168 input channels and 56 outputs on 121 pixels: the GEMM paths (direct_conv.direct_fits refuses them with or
# without AVX-512; on 7x7 maps the small-map rule would take them); 8 outputs: the direct kernel
TAPS = 168 * 9 + 1                  # the longest sum of products (3x3 over 168 channels, plus the bias)


def _model(weights=None, reread=False):
    """Five branches of x into one channel Concat: a 1x1 Conv with bias and Relu, a padded 3x3 Conv (im2col), a
    3x3 Conv of 8 outputs (direct), a MaxPool and a depthwise 3x3 Conv; a 1x1 MaxPool after the Concat keeps it
    in the channels-last region. ``weights`` replaces the initializers (the magnitude model); ``reread``: the 1x1
    Conv is also read by a sixth branch (a 1x1 MaxPool of it)."""
    rng = np.random.default_rng(5)
    values = weights or {
        "wa": rng.standard_normal((56, 168, 1, 1)) * 0.1, "ba": rng.standard_normal(56),
        "wb": rng.standard_normal((56, 168, 3, 3)) * 0.05, "bb": rng.standard_normal(56),
        "wc": rng.standard_normal((8, 168, 3, 3)) * 0.05, "wg": rng.standard_normal((168, 1, 3, 3))}
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in values.items()]
    nodes = [
        helper.make_node("Conv", ["x", "wa", "ba"], ["a"]),
        helper.make_node("Relu", ["a"], ["ar"]),
        helper.make_node("Conv", ["x", "wb", "bb"], ["b"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "wc"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["x"], ["d"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "wg"], ["g"], pads=[1, 1, 1, 1], group=168),
        helper.make_node("MaxPool", ["ar"], ["e"], kernel_shape=[1, 1]),
        helper.make_node("Concat", ["ar", "b", "c", "d", "g"] + (["e"] if reread else []), ["cat"], axis=1),
        helper.make_node("MaxPool", ["cat"], ["y"], kernel_shape=[1, 1]),
    ]
    if not reread:
        del nodes[6]
    graph = helper.make_graph(nodes, "conv_slices", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model, values


def _bound(values, x, reread):
    """Twice gamma(TAPS) times the output of the model on |x| and |weights| (each side's reordered sums; the
    Relu and the max pools do not enlarge an error)."""
    model, _ = _model({k: np.abs(v) for k, v in values.items()}, reread)
    magnitude = ReferenceEvaluator(model).run(None, {"x": np.abs(x)})[0]
    return 2 * gamma(TAPS) * magnitude


@pytest.fixture(params=["straight", "checked"])
def plan_path(request, monkeypatch):
    monkeypatch.setenv("NNHAL_CHECK", "1" if request.param == "checked" else "0")
    return request.param


@pytest.mark.skipif(not native.available(), reason="the GEMM paths and the direct kernel are native")
@pytest.mark.parametrize("threads", [1, 2, "numpy"])
@pytest.mark.parametrize("reread", [False, True], ids=["placed", "conv-read-twice"])
def test_convolutions_write_their_channel_slice(plan_path, monkeypatch, threads, reread):
    """threads "numpy": the pools off (NNHAL_CPU_POOL=0), the GEMM paths' numpy bands and epilogue write the slice."""
    if threads == "numpy":
        monkeypatch.setenv("NNHAL_CPU_POOL", "0")
        threads = 2
    model, values = _model(reread=reread)
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    copied = []
    run_of = concat_kernel.ConcatNative.prepare

    def counting_prepare(self, node, ins, outs):
        run = run_of(self, node, ins, outs)

        def run_counted(inputs, outputs):
            # the inputs the Concat must copy: those not already inside its output
            copied.extend(i for i, a in enumerate(inputs) if not np.may_share_memory(a, outputs[0]))
            return run(inputs, outputs)

        return run_counted

    monkeypatch.setattr(concat_kernel.ConcatNative, "prepare", counting_prepare)
    with nnhal.Session(model, devices=["cpu"], num_thread=threads) as s:
        got = s.run({"x": x})
        (plan,) = [sg.device_graph for sg in s.graph.execution.subgraphs]
    kernels = {st.node.outputs[0]: st.kernel_name for st in plan.steps}
    (concat,) = [st for st in plan.steps if st.node.op_type == "Concat"]
    assert concat.kernel_name == "native"
    a, b, c, d, g = concat.node.inputs[:5]
    assert kernels[a] == kernels[b] == kernels[c] == kernels[g] == "nhwc-gemm"
    placed = {b, c, d} | ({concat.node.inputs[5]} if reread else {a})
    assert set(plan.memory.strides) == placed                 # the depthwise convolution's output keeps its copy
    for name in placed:
        assert plan.memory.tensors[name].root == concat.node.outputs[0]
    assert copied == [concat.node.inputs.index(n) for n in concat.node.inputs if n not in placed]
    want = ReferenceEvaluator(model).run(None, {"x": x})
    assert_within_bound(got[0], want[0], _bound(values, x, reread))


@pytest.mark.skipif(not native.available(), reason="the GEMM paths and the direct kernel are native")
def test_fp16_storage_places_the_same_slices(plan_path):
    """fp16 storage computes in float32 inside the subgraph (fp16.py): the same convolutions write their slices,
    and the output is the float16 rounding of the reference on float16-rounded weights and input."""
    model, values = _model()
    x = np.random.default_rng(4).standard_normal(SHAPE).astype(np.float32)
    with nnhal.Session(model, devices=["cpu"], precision="fp16") as s:
        got = s.run({"x": x})[0]
        (plan,) = [sg.device_graph for sg in s.graph.execution.subgraphs]
    (concat,) = [st for st in plan.steps if st.node.op_type == "Concat"]
    a, b, c, d = concat.node.inputs[:4]
    assert set(plan.memory.strides) == {a, b, c, d}
    half = {k: np.asarray(v, np.float32).astype(np.float16).astype(np.float32) for k, v in values.items()}
    xh = x.astype(np.float16).astype(np.float32)
    wide = ReferenceEvaluator(_model(half)[0]).run(None, {"x": xh})[0]
    assert rounded_within(got, wide, _bound(half, xh, False), np.float16) is None
