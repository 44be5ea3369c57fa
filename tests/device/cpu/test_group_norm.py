"""InstanceNormalization / GroupNormalization on the native kernel (device/cpu/kernels/instance_norm.py) and the
plan's GroupNorm fusion (device/cpu/groupnorm.py) against onnxruntime, on both plan paths, within the rounding of
the mean and variance sums (conformance/tolerance.py) rather than bit for bit: the sums run in another order."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.conformance.tolerance import assert_within_bound, gamma

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (pip install -e '.[test]')")

RNG = np.random.default_rng(30)


def _model(nodes, inits, shape, opset=17, out="y") -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9 if opset >= 21 else 8
    if opset != 18:         # the checker rejects GroupNormalization-18 as deprecated; onnxruntime still runs it
        onnx.checker.check_model(model)
    return model


def _f32(*shape, scale=1.0, offset=0.0):
    return (RNG.standard_normal(shape) * scale + offset).astype(np.float32)


def _steps(model, monkeypatch, x) -> tuple[list[tuple[str, str]], list[np.ndarray]]:
    """(op, kernel) of every step, and the outputs of both plan paths."""
    results = []
    for check in ("1", "0"):
        monkeypatch.setenv("NNHAL_CHECK", check)
        with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
            results.append(s.run({"x": x})[0])
            steps = [(st.node.op_type, st.kernel_name) for sg in s.subgraphs for st in sg.device_graph.steps]
    return steps, results


def _check(model, x, monkeypatch, width: int, scale_max: float = 1.0):
    """Both paths against onnxruntime. The normalised values are O(1); their error is that of a mean and a
    variance over ``width`` elements relative to the row's spread, times the largest scale, on each side."""
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    steps, results = _steps(model, monkeypatch, x)
    rows = x.reshape(x.shape[0], -1)
    spread = float(np.max(np.abs(rows - rows.mean(axis=1, keepdims=True)))) / float(np.min(rows.std(axis=1)))
    bound = 4 * gamma(width + 8) * (1 + spread) * scale_max * (1 + float(np.abs(want).max()))
    for got in results:
        assert_within_bound(got, want, bound)
    return steps


@pytest.mark.parametrize("shape", [(2, 5, 7, 9), (1, 3, 1000), (1, 4, 3, 5, 2)])
@pytest.mark.parametrize("relu", [False, True])
def test_instance_normalization(shape, relu, monkeypatch):
    c = shape[1]
    nodes = [helper.make_node("InstanceNormalization", ["x", "s", "b"], ["n" if relu else "y"], epsilon=1e-3)]
    if relu:
        nodes.append(helper.make_node("Relu", ["n"], ["y"]))
    model = _model(nodes, {"s": _f32(c, scale=2.0), "b": _f32(c)}, list(shape))
    x = _f32(*shape, scale=3.0, offset=5.0)          # a mean far from 0: the variance must not cancel
    steps = _check(model, x, monkeypatch, int(np.prod(shape[2:])), scale_max=6.0)
    assert steps == [("InstanceNormalization", "native")]


def _torch_group_norm(shape, groups, tail=("Mul", "Add", "Relu")) -> onnx.ModelProto:
    """nn.GroupNorm as torch.onnx exports it, then the ops in ``tail``."""
    n, c = shape[:2]
    inits = {"grouped": np.array([n, groups, -1], np.int64), "back": np.array(shape, np.int64),
             "ones": np.ones(groups, np.float32), "zeros": np.zeros(groups, np.float32),
             "gamma": _f32(c, 1, 1, scale=1.5), "beta": _f32(c, 1, 1)}
    nodes = [helper.make_node("Reshape", ["x", "grouped"], ["r"]),
             helper.make_node("InstanceNormalization", ["r", "ones", "zeros"], ["i"], epsilon=1e-5),
             helper.make_node("Reshape", ["i", "back"], ["t0"])]
    for k, op in enumerate(tail):
        inputs = {"Mul": [f"t{k}", "gamma"], "Add": ["beta", f"t{k}"], "Relu": [f"t{k}"]}[op]
        nodes.append(helper.make_node(op, inputs, [f"t{k + 1}"]))
    nodes.append(helper.make_node("Identity", [f"t{len(tail)}"], ["y"]))
    return _model(nodes, inits, list(shape))


@pytest.mark.parametrize("tail", [("Mul", "Add", "Relu"), ("Mul", "Add"), ()])
def test_torch_group_norm_becomes_one_node(tail, monkeypatch):
    shape, groups = (2, 12, 6, 5), 4
    steps = _check(_torch_group_norm(shape, groups, tail), _f32(*shape, scale=2.0, offset=-3.0), monkeypatch,
                   3 * 6 * 5, scale_max=6.0)
    assert [s for s in steps if s[0] not in ("Identity",)] == [("GroupNormalization", "native")]


def test_a_group_norm_intermediate_read_elsewhere_is_not_fused(monkeypatch):
    shape = (1, 8, 4, 4)
    model = _torch_group_norm(shape, 2, ("Mul", "Add"))
    model.graph.output.append(helper.make_tensor_value_info("i", TensorProto.FLOAT, [1, 2, 64]))
    x = _f32(*shape)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    steps, _ = _steps(model, monkeypatch, x)
    assert ("InstanceNormalization", "native") in steps and ("GroupNormalization", "native") not in steps
    with nnhal.Session(model, devices=["cpu"]) as s:
        for got, w in zip(s.run({"x": x}), want):
            assert_within_bound(got, w, 8 * gamma(64) * (1 + float(np.abs(w).max())) * 6)


@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization_node(opset, monkeypatch):
    shape, groups = (2, 6, 5, 4), 3
    size = groups if opset < 21 else shape[1]
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=groups, epsilon=1e-4)
    model = _model([node], {"s": _f32(size, scale=2.0), "b": _f32(size)}, list(shape), opset=opset)
    if opset >= 21:
        pytest.importorskip("onnxruntime", minversion="1.20", reason="GroupNormalization-21 needs onnxruntime 1.20")
    steps = _check(model, _f32(*shape, offset=1.0), monkeypatch, 2 * 5 * 4, scale_max=6.0)
    assert steps == [("GroupNormalization", "native")]


def _conv_group_norm_pool(shape, groups, opset, m=16):
    """Conv 3x3 -> GroupNormalization -> Relu -> MaxPool 2x2: a channels-last region with the GroupNorm inside."""
    n, c, h, w = shape
    size = groups if opset < 21 else m
    inits = {"w": _f32(m, c, 3, 3, scale=0.5), "cb": _f32(m, offset=4.0), "s": _f32(size, scale=2.0),
             "b": _f32(size)}
    nodes = [helper.make_node("Conv", ["x", "w", "cb"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("GroupNormalization", ["c", "s", "b"], ["g"], num_groups=groups, epsilon=1e-5),
             helper.make_node("Relu", ["g"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("c", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9 if opset >= 21 else 8
    return model


@pytest.mark.parametrize("opset,shape,groups", [(18, (1, 8, 20, 20), 4), (21, (2, 5, 9, 7), 8)])
def test_group_normalization_runs_channels_last_inside_a_conv_region(opset, shape, groups, monkeypatch):
    if opset >= 21:
        pytest.importorskip("onnxruntime", minversion="1.20", reason="GroupNormalization-21 needs onnxruntime 1.20")
    model = _conv_group_norm_pool(shape, groups, opset)
    x = _f32(*shape)
    want, conv = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for check in ("1", "0"):
        monkeypatch.setenv("NNHAL_CHECK", check)
        with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
            got, got_conv = s.run({"x": x})
            steps = [(st.node.op_type, st.kernel_name) for sg in s.subgraphs for st in sg.device_graph.steps]
        assert ("GroupNormalization", "nhwc-native") in steps
        # the Conv's own rounding (a sum of 9 C products) and the GroupNorm's (a mean and variance over a
        # group's width, relative to its spread) times the largest scale; MaxPool and Relu add none
        k = 9 * shape[1]
        conv_err = gamma(k + 1) * (k * float(np.abs(x).max()) * 0.5 * 5 + 10)
        assert_within_bound(got_conv, conv, conv_err)
        rows = conv.reshape(shape[0] * groups, -1)
        spread = float(np.max(np.abs(rows - rows.mean(axis=1, keepdims=True)))) / float(np.min(rows.std(axis=1)))
        width = rows.shape[1]
        std = float(np.min(rows.std(axis=1)))
        bound = (4 * gamma(width + 8) * (1 + spread) + 2 * conv_err / std) * 6.0 * (1 + float(np.abs(want).max()))
        assert_within_bound(got, want, bound)


def test_a_torch_group_norm_after_a_conv_runs_channels_last(monkeypatch):
    shape, groups = (1, 12, 10, 10), 4
    model = _torch_group_norm(shape, groups, ("Mul", "Add", "Relu"))
    # a Conv in front (the layout pass then keeps the fused GroupNormalization channels last)
    model.graph.node.insert(0, helper.make_node("Conv", ["x0", "wc"], ["x"], pads=[1, 1, 1, 1]))
    model.graph.initializer.append(numpy_helper.from_array(_f32(12, 12, 3, 3, scale=0.3), "wc"))
    model.graph.input[0].name = "x0"
    x = _f32(*shape, offset=2.0)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x0": x})[0]
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = s.run({"x0": x})[0]
        steps = [(st.node.op_type, st.kernel_name) for sg in s.subgraphs for st in sg.device_graph.steps]
    assert ("GroupNormalization", "nhwc-native") in steps
    # the NCHW kernel's bound (_check) over a group's 300 values, with a Conv's rounding (108 products) on top
    assert_within_bound(got, want, 4 * gamma(300 + 108) * 6.0 * (1 + float(np.abs(want).max())))
