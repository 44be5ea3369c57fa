"""The CPU's fused and standalone gates (HardSwish, HardSigmoid, Sigmoid, SiLU): the in-place math of
hostkernels/_blocks.py (numpy) and device/cpu/kernels/_gates.py (native where built), their fusion into the
producing Conv/Gemm/MatMul (device/cpu/fusions.py), and the standalone fast kernels, all against onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import native
from nnhal.device.cpu.kernels import _gates
from nnhal.hostkernels import _blocks
from nnhal.hostkernels._scratch import apply_activation
from nnhal.hostkernels.fused import Activation, activation_of

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")

RTOL = 1e-5


def _exact(kind: str, x: np.ndarray, alpha: float = 0.2, beta: float = 0.5) -> np.ndarray:
    """The gate in float64, straight from its definition."""
    x = x.astype(np.float64)
    sig = 1.0 / (1.0 + np.exp(-x))
    return {"hardswish": x * np.clip(x / 6 + 0.5, 0, 1), "hardsigmoid": np.clip(alpha * x + beta, 0, 1),
            "sigmoid": sig, "silu": x * sig}[kind]


def _close(got, want, rtol=RTOL):
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale)


KINDS = {"hardswish": Activation("hardswish"), "hardsigmoid": Activation("hardsigmoid", alpha=0.3, beta=0.4),
         "sigmoid": Activation("sigmoid"), "silu": Activation("silu")}


@pytest.mark.parametrize("gates", [_blocks.NUMPY_GATES, _gates.GATES], ids=["numpy", "cpu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", list(KINDS))
def test_in_place_gates_match_their_definition(kind, dtype, gates):
    rng = np.random.default_rng(len(kind))
    act = KINDS[kind]
    # more than one CHUNK with a ragged tail, the extremes (e^-x overflowing), and a strided view
    big = (rng.standard_normal((3, _blocks.CHUNK // 2 + 7)) * 6).astype(dtype)
    big[0, :4] = [-200.0, 200.0, 0.0, -3.0]
    for x in (big, big[:, ::3], np.asarray(dtype(1.5))):
        y = x.copy()
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            apply_activation(y, act, gates)
        _close(y, _exact(kind, x, act.alpha, act.beta), 1e-6 if dtype == np.float32 else 1e-12)


def _model(nodes, inits, outputs, in_shape, opset=17):
    graph = helper.make_graph(nodes, "gates", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _run(model, shape, oracle=True):
    x = (np.random.default_rng(0).standard_normal(shape) * 3).astype(np.float32)
    s = nnhal.Session(model, devices=["cpu"])
    got = s.run({"x": x})
    if oracle:
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        for g, w in zip(got, want):
            _close(g, w)
    return [st for sg in s.graph.execution.subgraphs for st in sg.device_graph.steps], got


def _gate(kind: str, src: str, out: str) -> list:
    if kind == "silu":
        return [helper.make_node("Sigmoid", [src], [f"{out}_s"]), helper.make_node("Mul", [f"{out}_s", src], [out])]
    attrs = {"alpha": 0.3, "beta": 0.4} if kind == "hardsigmoid" else {}
    op = {"hardswish": "HardSwish", "hardsigmoid": "HardSigmoid", "sigmoid": "Sigmoid"}[kind]
    return [helper.make_node(op, [src], [out], **attrs)]


def _producer(op: str, rng) -> tuple[list, dict, tuple]:
    """A Conv, Gemm or MatMul writing "p", its constants and the input shape."""
    w = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)   # noqa: E731
    if op == "Conv":
        return [helper.make_node("Conv", ["x", "w", "b"], ["p"], pads=[1, 1, 1, 1])], \
            {"w": w(12, 6, 3, 3), "b": w(12)}, (1, 6, 9, 9)
    if op == "Gemm":
        return [helper.make_node("Gemm", ["x", "w", "b"], ["p"], transB=1)], {"w": w(24, 16), "b": w(24)}, (5, 16)
    return [helper.make_node("MatMul", ["x", "w"], ["p"])], {"w": w(16, 24)}, (2, 5, 16)


@pytest.mark.parametrize("op", ["Conv", "Gemm", "MatMul"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_each_gate_fused_and_unfused_matches_onnxruntime(kind, op):
    rng = np.random.default_rng(7)
    nodes, inits, shape = _producer(op, rng)
    fused_model = _model(nodes + _gate(kind, "p", "y"), inits, ["y"], shape)
    steps, (fused_y,) = _run(fused_model, shape)
    assert [st.node.op_type for st in steps if st.node.op_type not in ("Transpose",)] == [op], steps
    (step,) = [st for st in steps if st.node.op_type == op]
    assert activation_of(step.node).kind == kind
    # the producer's output also leaves the graph: nothing fuses, the standalone kernels run
    unfused_model = _model(nodes + _gate(kind, "p", "y"), inits, ["y", "p"], shape)
    steps, (unfused_y, _) = _run(unfused_model, shape)
    assert all(activation_of(st.node) is None for st in steps)
    _close(unfused_y, fused_y)


@pytest.mark.parametrize("op", ["HardSwish", "HardSigmoid", "Sigmoid"])
def test_standalone_gates_run_the_in_place_kernels(op):
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node(op, ["a"], ["y"])]    # Neg fuses nothing
    steps, _ = _run(_model(nodes, {}, ["y"], (2, 3, 70000)), (2, 3, 70000))
    # the cpu device's native gate where the extension is built, else the host's numpy one in place
    want = "native" if native.available() else "fast"
    assert [(st.node.op_type, st.kernel_name) for st in steps][-1] == (op, want)


def test_swish_with_alpha_one_fuses_as_silu_and_other_alphas_run_the_reference():
    shape = (1, 6, 9, 9)
    for alpha, fused in ((1.0, True), (0.5, False)):
        nodes, inits, _ = _producer("Conv", np.random.default_rng(1))
        model = _model(nodes + [helper.make_node("Swish", ["p"], ["y"], alpha=alpha)], inits, ["y"], shape, opset=24)
        steps, (y,) = _run(model, shape, oracle=False)     # onnxruntime 1.32 has no Swish-24 kernel
        conv = [st for st in steps if st.node.op_type == "Conv"][0]
        assert (activation_of(conv.node) is not None) == fused
        ref = nnhal.Session(_model(nodes, inits, ["p"], shape), devices=["cpu"]).run(
            {"x": (np.random.default_rng(0).standard_normal(shape) * 3).astype(np.float32)})[0]
        _close(y, ref * _exact("sigmoid", alpha * ref))


def test_a_sigmoid_read_elsewhere_is_not_fused_as_silu():
    rng = np.random.default_rng(3)
    nodes, inits, shape = _producer("Conv", rng)
    nodes += [helper.make_node("Sigmoid", ["p"], ["s"]), helper.make_node("Mul", ["p", "s"], ["y"]),
              helper.make_node("Add", ["s", "y"], ["z"])]
    steps, _ = _run(_model(nodes, inits, ["z"], shape), shape)
    assert [st.node.op_type for st in steps if st.node.op_type != "Transpose"] == ["Conv", "Sigmoid", "Mul", "Add"]
    assert all(activation_of(st.node) is None for st in steps)
