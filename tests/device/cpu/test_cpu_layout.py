"""The CPU's channels-last pass (device/cpu/layout.py): which regions run NHWC, where it converts, and that
results still match onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")

# the kernel names of a region's channels-last ops: "nhwc..." and the direct Conv's channels-first sides at its edges
REGION_KERNELS = ("nhwc", "direct-nchw")


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def _model(nodes, inits, outputs, in_shape=(1, 8, 12, 12)):
    graph = helper.make_graph(nodes, "layout", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model


def _run_both(model, shape=(1, 8, 12, 12)):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    s = nnhal.Session(model, devices=["cpu"])
    got = s.run({"x": x})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())))
    steps = [st for sg in s.graph.execution.subgraphs for st in sg.device_graph.steps]
    return steps


def _kernels(steps):
    return [(st.node.op_type, st.kernel_name) for st in steps]


def _w(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32) * 0.3


def test_a_residual_network_runs_channels_last_with_conversions_only_at_its_edges():
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "p1"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["m"]),             # a per-channel constant, NHWC broadcast
        helper.make_node("Relu", ["m"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3"], ["c3"], kernel_shape=[1, 1]),
        helper.make_node("Concat", ["c3", "r2"], ["cat"], axis=1),
        helper.make_node("GlobalAveragePool", ["cat"], ["g"]),
        helper.make_node("Flatten", ["g"], ["y"]),
    ]
    inits = [_const("w1", _w(rng, 16, 8, 3, 3)), _const("b1", _w(rng, 16)), _const("w2", _w(rng, 16, 16, 3, 3)),
             _const("b2", _w(rng, 16)), _const("scale", _w(rng, 16, 1, 1)), _const("w3", _w(rng, 4, 16, 1, 1))]
    steps = _run_both(_model(nodes, inits, ["y"]))
    kernels = _kernels(steps)
    pooled = ("Conv", "MaxPool", "GlobalAveragePool")
    assert all(k.startswith(REGION_KERNELS) for op, k in kernels if op in pooled), kernels
    # one conversion out (the pooled features before Flatten); none in: the stem reads the NCHW graph input
    # itself (direct-nchw-in, layout.py nchw_input)
    assert [k for _, k in kernels if k.startswith("to-")] == ["to-nchw"], kernels


def test_tensors_read_by_layout_bound_ops_or_leaving_the_graph_stay_nchw():
    rng = np.random.default_rng(2)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),                    # r1 is also a graph output
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["c2", "shape"], ["y"]),         # not a channel permutation
    ]
    inits = [_const("w1", _w(rng, 8, 8, 3, 3)), _const("w2", _w(rng, 8, 8, 3, 3)),
             numpy_helper.from_array(np.array([1, 8, 144], np.int64), "shape")]
    steps = _run_both(_model(nodes, inits, ["r1", "y"]))
    # each convolution reads or writes a tensor that leaves the graph or feeds the Reshape: NHWC would
    # only add conversions, so none runs channels last and nothing is converted
    kernels = _kernels(steps)
    assert not any(k.startswith(("nhwc", "to-")) for _, k in kernels), kernels


def test_a_channel_shuffle_after_a_convolution_becomes_a_permutation_of_its_weights():
    rng = np.random.default_rng(4)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[1, 1], group=2),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Reshape", ["r1", "shape"], ["sh"]),        # ShuffleNet's channel shuffle
        helper.make_node("Transpose", ["sh"], ["tr"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["tr", "back"], ["un"]),
        helper.make_node("Conv", ["un", "w2"], ["c2"], pads=[1, 1, 1, 1], group=8),
        helper.make_node("Conv", ["c2", "w3"], ["y"], kernel_shape=[1, 1], group=2),
    ]
    inits = [_const("w1", _w(rng, 8, 4, 1, 1)), _const("b1", _w(rng, 8)), _const("w2", _w(rng, 8, 1, 3, 3)),
             _const("w3", _w(rng, 8, 4, 1, 1)),
             numpy_helper.from_array(np.array([1, 2, 4, 12, 12], np.int64), "shape"),
             numpy_helper.from_array(np.array([1, 8, 12, 12], np.int64), "back")]
    steps = _run_both(_model(nodes, inits, ["y"]))
    kernels = _kernels(steps)
    assert [op for op, _ in kernels if op in ("Reshape", "Transpose") and not _.startswith("to-")] == [], kernels
    first = next(st for st in steps if st.node.op_type == "Conv")
    assert first.node.attrs["group"] == 1 and first.node.outputs == ["un"]     # groups mixed: dense now
    # one region from the first convolution to the last: converted once in, once out
    # the stem reads the NCHW input itself (direct-nchw-in, layout.py nchw_input): no conversion before it
    assert [k for _, k in kernels if k.startswith("to-")] == ["to-nchw"], kernels


def test_layout_free_ops_with_runtime_bounds_and_constant_concat_inputs():
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("ReduceMax", ["x"], ["hi"], keepdims=0),     # a runtime scalar bound
        helper.make_node("Clip", ["c1", "", "hi"], ["cl"]),
        helper.make_node("Concat", ["cl", "k"], ["cat"], axis=1),     # a constant 4-D Concat input
        helper.make_node("AveragePool", ["cat"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Sub", ["ap", "bias"], ["y"]),               # a scalar constant
    ]
    inits = [_const("w1", _w(rng, 8, 8, 3, 3)), _const("k", _w(rng, 1, 2, 12, 12)), _const("bias", 0.25)]
    steps = _run_both(_model(nodes, inits, ["y"]))
    assert ("AveragePool", "nhwc") in [(op, k[:4]) for op, k in _kernels(steps)]


CONV_OPS = ["Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "BatchNormalization", "Relu", "Clip", "Add", "Mul",
            "Concat", "Sigmoid", "Transpose", "Reshape"]


def test_random_convolutional_graphs_match_the_reference_kernels():
    from nnhal.conformance.random_graph import differential, generate

    seeds = range(80)
    channels_last = 0
    for seed in seeds:
        model, feeds = generate(seed, CONV_OPS, 12)
        s = nnhal.Session(model, devices=["cpu"])
        s.run(feeds)
        channels_last += any(st.kernel_name.startswith("nhwc") for sg in s.graph.execution.subgraphs
                             for st in sg.device_graph.steps)
    assert channels_last >= 10          # the comparison below really covers NHWC regions
    found = differential("cpu", seeds, ops=CONV_OPS, max_nodes=12)
    assert not found, "\n".join(str(m) for m in found)


def test_an_unread_dropout_mask_does_not_break_a_region():
    rng = np.random.default_rng(5)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Dropout", ["c1"], ["d", "mask"]),          # the mask is never read
        helper.make_node("Conv", ["d", "w2"], ["c2"], kernel_shape=[1, 1]),
        helper.make_node("GlobalAveragePool", ["c2"], ["y"]),
    ]
    steps = _run_both(_model(nodes, [_const("w1", _w(rng, 8, 8, 3, 3)), _const("w2", _w(rng, 4, 8, 1, 1))], ["y"]))
    # the stem reads the NCHW input itself (direct-nchw-in, layout.py nchw_input): no conversion before it
    assert [k for _, k in _kernels(steps) if k.startswith("to-")] == ["to-nchw"], _kernels(steps)


def test_a_channel_shuffle_too_costly_to_fold_becomes_a_gather_of_channels_inside_the_region():
    rng = np.random.default_rng(6)
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], kernel_shape=[1, 1]),
        helper.make_node("Conv", ["c0", "w1"], ["c1"], kernel_shape=[1, 1], group=4),   # 256 channels
        helper.make_node("Reshape", ["c1", "shape"], ["sh"]),
        helper.make_node("Transpose", ["sh"], ["tr"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["tr", "back"], ["un"]),
        helper.make_node("Conv", ["un", "w2"], ["c2"], pads=[1, 1, 1, 1], group=256),
        helper.make_node("GlobalAveragePool", ["c2"], ["y"]),
    ]
    inits = [_const("w0", _w(rng, 256, 8, 1, 1)), _const("w1", _w(rng, 256, 64, 1, 1)),
             _const("w2", _w(rng, 256, 1, 3, 3)),
             numpy_helper.from_array(np.array([1, 4, 64, 12, 12], np.int64), "shape"),
             numpy_helper.from_array(np.array([1, 256, 12, 12], np.int64), "back")]
    steps = _run_both(_model(nodes, inits, ["y"]))
    kernels = _kernels(steps)
    # densifying the group-4 convolution would add 192 multiply-adds per output: one Gather instead, run on
    # the channels-last axis, and no conversion inside the region
    gathers = [st for st in steps if st.node.op_type == "Gather"]
    assert len(gathers) == 1 and gathers[0].node.attrs["axis"] == 3, kernels
    assert not any(op in ("Reshape", "Transpose") and not k.startswith("to-") for op, k in kernels), kernels
    # the stem reads the NCHW input itself (direct-nchw-in, layout.py nchw_input): no conversion before it
    assert [k for _, k in kernels if k.startswith("to-")] == ["to-nchw"], kernels


def _se_block(rng):
    """MobileNetV3/EfficientNet's squeeze-excite around a depthwise convolution, with its activations."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("HardSwish", ["c1"], ["h1"]),
        helper.make_node("Conv", ["h1", "wd", "bd"], ["d1"], pads=[1, 1, 1, 1], group=16),
        helper.make_node("Sigmoid", ["d1"], ["s1"]),
        helper.make_node("Mul", ["d1", "s1"], ["silu"]),
        helper.make_node("GlobalAveragePool", ["silu"], ["g"]),
        helper.make_node("Conv", ["g", "wr", "br"], ["r"]),
        helper.make_node("Relu", ["r"], ["rr"]),
        helper.make_node("Conv", ["rr", "we", "be"], ["e"]),
        helper.make_node("HardSigmoid", ["e"], ["gate"], alpha=1 / 6, beta=0.5),
        helper.make_node("Mul", ["silu", "gate"], ["m"]),            # (1, 16, 12, 12) x (1, 16, 1, 1)
        helper.make_node("Conv", ["m", "w2"], ["c2"]),
        helper.make_node("GlobalAveragePool", ["c2"], ["gp"]),
        helper.make_node("Flatten", ["gp"], ["y"]),
    ]
    inits = [_const("w1", _w(rng, 16, 8, 3, 3)), _const("b1", _w(rng, 16)), _const("wd", _w(rng, 16, 1, 3, 3)),
             _const("bd", _w(rng, 16)), _const("wr", _w(rng, 4, 16, 1, 1)), _const("br", _w(rng, 4)),
             _const("we", _w(rng, 16, 4, 1, 1)), _const("be", _w(rng, 16)), _const("w2", _w(rng, 8, 16, 1, 1))]
    return nodes, inits


def test_a_squeeze_excite_block_stays_channels_last_with_its_activations_fused():
    nodes, inits = _se_block(np.random.default_rng(5))
    steps = _run_both(_model(nodes, inits, ["y"]))
    kernels = _kernels(steps)
    # the stem reads the NCHW input itself (direct-nchw-in, layout.py nchw_input): no conversion before it
    assert [k for _, k in kernels if k.startswith("to-")] == ["to-nchw"], kernels
    assert all(k.startswith(REGION_KERNELS) for op, k in kernels if op in ("Conv", "GlobalAveragePool")), kernels
    # HardSwish, SiLU (Sigmoid -> Mul), Relu and HardSigmoid ride on their convolutions; the gate's Mul
    # broadcasts the pooled (N, 1, 1, C) gate over the (N, H, W, C) map
    assert [op for op, _ in kernels] == ["Conv", "Conv", "GlobalAveragePool", "Conv", "Conv", "Mul",
                                         "Conv", "GlobalAveragePool", "Transpose", "Flatten"], kernels
    acts = [st.node.activation.kind for st in steps if getattr(st.node, "activation", None) is not None]
    assert acts == ["hardswish", "silu", "relu", "hardsigmoid"]


def _convnext_block(rng, c=16):
    """ConvNeXt's block: 7x7 depthwise -> Transpose to (N, H, W, C) -> LayerNorm -> MLP -> layer scale ->
    Transpose back -> residual Add, between two convolutions."""
    nodes = [
        helper.make_node("Conv", ["x", "ws", "bs"], ["stem"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["stem", "wd", "bd"], ["d"], pads=[3, 3, 3, 3], group=c),
        helper.make_node("Transpose", ["d"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("LayerNormalization", ["t", "lg", "lb"], ["ln"], axis=-1, epsilon=1e-6),
        helper.make_node("MatMul", ["ln", "m1"], ["a1"]),
        helper.make_node("Add", ["a1", "mb1"], ["a2"]),
        helper.make_node("Gelu", ["a2"], ["g"]),
        helper.make_node("MatMul", ["g", "m2"], ["a3"]),
        helper.make_node("Mul", ["a3", "ls"], ["a4"]),
        helper.make_node("Transpose", ["a4"], ["tb"], perm=[0, 3, 1, 2]),
        helper.make_node("Add", ["tb", "stem"], ["res"]),
        helper.make_node("Conv", ["res", "wd2", "bd2"], ["d2"], pads=[3, 3, 3, 3], group=c),
        helper.make_node("GlobalAveragePool", ["d2"], ["gp"]),
        helper.make_node("Flatten", ["gp"], ["y"]),
    ]
    inits = [_const("ws", _w(rng, c, 8, 2, 2)), _const("bs", _w(rng, c)), _const("wd", _w(rng, c, 1, 7, 7)),
             _const("bd", _w(rng, c)), _const("lg", 1 + _w(rng, c)), _const("lb", _w(rng, c)),
             _const("m1", _w(rng, c, 4 * c)), _const("mb1", _w(rng, 4 * c)), _const("m2", _w(rng, 4 * c, c)),
             _const("ls", _w(rng, c)), _const("wd2", _w(rng, c, 1, 7, 7)), _const("bd2", _w(rng, c))]
    return nodes, inits


def _opset20(model):
    model.opset_import[0].version = 20          # Gelu
    return model


def test_convnext_transposes_to_and_from_channels_last_are_the_nhwc_storage_itself():
    nodes, inits = _convnext_block(np.random.default_rng(6))
    steps = _run_both(_opset20(_model(nodes, inits, ["y"], (1, 8, 16, 16))), (1, 8, 16, 16))
    kernels = _kernels(steps)
    # the only transposes left are the input's and the pooled features' conversions
    # the stem reads the NCHW input itself (direct-nchw-in, layout.py nchw_input): no conversion before it
    assert [k for op, k in kernels if op == "Transpose"] == ["to-nchw"], kernels
    assert all(k.startswith(REGION_KERNELS) for op, k in kernels if op in ("Conv", "GlobalAveragePool")), kernels
    by_op = {st.node.op_type: st.node for st in steps}
    # LayerNorm reads the depthwise convolution's NHWC output; the residual Add reads the layer scale's
    assert by_op["LayerNormalization"].inputs[0] == "d"
    assert steps[[st.node.op_type for st in steps].index("Add")].node.inputs[0] == "a4"


def test_a_transposed_tensor_leaving_the_graph_is_still_made():
    nodes, inits = _convnext_block(np.random.default_rng(7))
    steps = _run_both(_opset20(_model(nodes, inits, ["y", "t", "tb"], (1, 8, 16, 16))), (1, 8, 16, 16))
    ops = [st.node.op_type for st in steps]
    assert ops.count("Transpose") >= 2 + 2, _kernels(steps)


def test_back_to_back_transposes_inside_a_region_cost_nothing():
    rng = np.random.default_rng(8)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Transpose", ["c1"], ["t1"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 3, 1, 2]),
        helper.make_node("Relu", ["t2"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    inits = [_const("w1", _w(rng, 8, 8, 3, 3)), _const("w2", _w(rng, 8, 8, 3, 3))]
    steps = _run_both(_model(nodes, inits, ["y"]))
    # both edges are the direct kernel's channels-first sides (layout.py nchw_input, nchw_output): no conversion
    assert [k for op, k in _kernels(steps) if op == "Transpose"] == [], _kernels(steps)
    assert [k for op, k in _kernels(steps) if op == "Conv"] == ["direct-nchw-in", "direct-nchw-out"], _kernels(steps)
