"""cpu_device.float_conv and optimizer/precision.py ``float_conv``: under int8 / uint8, a shallow convolution of the
float model input (K = channels x taps <= FLOAT_CONV_MAX_K, a detector's 3 -> 16 stem) stays a float Conv (float32
weights, its Relu / SiLU fused, one QuantizeLinear after it and none of the image) where the integer kernels run the
avx2 path; NNHAL_FLOAT_CONVS=0 / 1 forces never / always. The float path is compared with fp32 (no less accurate than
the all-integer plan) and with the same plan on the numpy reference kernels."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import nnhal
from nnhal.device.cpu import cpu_device, qnative
from nnhal.graph.node import Node
from nnhal.optimizer.infer import infer_graph
from nnhal.optimizer.precision import _activation_tail
from nnhal.serializer.onnx_import import load_onnx
from tests.conftest import make_model, vinfo

pytestmark = pytest.mark.skipif(not qnative.available(), reason="integer kernels not built")


def _model(cin: int = 3, act: str = "silu", side: int = 20):
    """x (``cin`` channels) -> 3x3 / 2 conv to 16 -> ``act`` -> 3x3 conv 16 -> 16 -> Relu -> 1x1 conv -> y."""
    rng = np.random.default_rng(7)
    inits = {"w1": rng.standard_normal((16, cin, 3, 3)) * 0.3, "b1": rng.standard_normal(16) * 0.1,
             "w2": rng.standard_normal((16, 16, 3, 3)) * 0.1, "w3": rng.standard_normal((8, 16, 1, 1)) * 0.2}
    inits = {k: v.astype(np.float32) for k, v in inits.items()}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1], strides=[2, 2])]
    if act == "silu":
        nodes += [helper.make_node("Sigmoid", ["a"], ["as"]), helper.make_node("Mul", ["a", "as"], ["am"])]
    else:
        nodes += [helper.make_node("Relu", ["a"], ["am"])]
    nodes += [helper.make_node("Conv", ["am", "w2"], ["b"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["b"], ["br"]),
              helper.make_node("Conv", ["br", "w3"], ["y"])]
    out = side // 2
    model = make_model(nodes, [vinfo("x", [2, cin, side, side])], [vinfo("y", [2, 8, out, out])],
                       [numpy_helper.from_array(v, k) for k, v in inits.items()])
    feeds = [{"x": rng.standard_normal((2, cin, side, side)).astype(np.float32)} for _ in range(3)]
    return model, feeds


def _steps(session):
    return [(st.node.op_type, st.kernel.name) for sg in session.graph.execution.subgraphs
            for st in sg.device_graph.steps]


def _run(model, feeds, precision, table, monkeypatch, mode: str):
    monkeypatch.setenv("NNHAL_FLOAT_CONVS", mode)
    with nnhal.Session(model, devices=["cpu"], precision=precision, calibration=table) as q:
        return q.run(feeds)[0], _steps(q)


@pytest.mark.parametrize("act", ["silu", "relu"])
@pytest.mark.parametrize("precision", ["int8", "uint8"])
def test_a_shallow_conv_of_the_input_stays_float_with_its_activation(precision, act, monkeypatch):
    model, feeds = _model(act=act)
    table = nnhal.calibrate(model, feeds[:2], progress=False)
    with nnhal.Session(model, devices=["cpu"]) as fp32:
        want = fp32.run(feeds[2])[0]
    got, steps = _run(model, feeds[2], precision, table, monkeypatch, "1")
    ops = [op for op, _ in steps]
    assert ops[0] == "Conv" and ops.count("QLinearConv") == 2, steps
    assert "QLinearMul" not in ops and "Sigmoid" not in ops and "Mul" not in ops and "Relu" not in ops, steps
    assert ops.count("QuantizeLinear") == 1 and ops.index("QuantizeLinear") > 0, steps     # of the stem's output
    integer, steps0 = _run(model, feeds[2], precision, table, monkeypatch, "0")
    assert [op for op, _ in steps0].count("QLinearConv") == 3, steps0
    err, err0 = np.linalg.norm(got - want), np.linalg.norm(integer - want)
    # NOTE: float32 weights and sums where the integer plan has 7-bit weights and a quantized image: no less accurate
    # (10% slack: the two plans round their activations at different points)
    assert err <= 0.05 * np.linalg.norm(want) and err <= 1.1 * err0, (err, err0)
    monkeypatch.setenv("NNHAL_FLOAT_CONVS", "1")
    monkeypatch.setenv("NNHAL_CPU_REFERENCE", "1")       # the same plan on the numpy reference kernels
    with nnhal.Session(model, devices=["cpu"], precision=precision, calibration=table) as ref:
        expect = ref.run(feeds[2])[0]
    # the float stem's sums differ from the reference's by float32 rounding (another summation order): a code of its
    # output moves by one step where a value lies within rounding of a half, and the integer layers after it carry that
    codes = np.unique(expect)
    step = float(np.min(np.diff(codes))) if codes.size > 1 else 1.0
    assert np.mean(got != expect) < 0.05 and np.max(np.abs(got - expect)) <= 8 * step


def test_never_when_forced_off_nor_for_deeper_convs(monkeypatch):
    model, feeds = _model()
    table = nnhal.calibrate(model, feeds[:2], progress=False)
    _, steps = _run(model, feeds[2], "int8", table, monkeypatch, "0")
    assert "Conv" not in [op for op, _ in steps]
    model, feeds = _model(cin=4)            # K = 36
    table = nnhal.calibrate(model, feeds[:2], progress=False)
    _, steps = _run(model, feeds[2], "int8", table, monkeypatch, "1")
    assert [op for op, _ in steps].count("QLinearConv") == 3, steps


def test_the_default_follows_the_instruction_set(monkeypatch):
    model, _ = _model()
    graph = load_onnx(model)
    infer_graph(graph)
    stem, deeper = [n for n in graph.nodes if n.op_type == "Conv"][:2]
    monkeypatch.delenv("NNHAL_FLOAT_CONVS", raising=False)
    assert cpu_device.float_conv(stem, graph) == (qnative.status().isa == "avx2")
    assert not cpu_device.float_conv(deeper, graph)           # not on the input
    monkeypatch.setenv("NNHAL_FLOAT_CONVS", "0")
    assert not cpu_device.float_conv(stem, graph)


def test_the_activation_tail():
    conv = Node("c", "Conv", ["x", "w"], ["b"])
    sig, mul = Node("s", "Sigmoid", ["b"], ["bs"]), Node("m", "Mul", ["b", "bs"], ["bm"])
    assert _activation_tail(conv, {"b": [sig, mul], "bs": [mul]}) == ["s", "m"]
    other = Node("o", "Add", ["bs", "b"], ["z"])
    assert _activation_tail(conv, {"b": [sig, mul], "bs": [mul, other]}) == []      # the Sigmoid read elsewhere
    assert _activation_tail(conv, {"b": [Node("r", "Relu", ["b"], ["r"])]}) == ["r"]
    assert _activation_tail(conv, {"b": [Node("r", "Relu", ["b"], ["r"]), other]}) == []
