"""A MatMul or Gemm with a constant bias and a fused activation (a feed-forward's linear1 + ReLU, a SiLU MLP)
runs the activation in the native GEMM's epilogue (kernels/matmul.py gemm_first), not as a pass after it:
against float64, with the activation applied exactly once, and the separate pass kept where the native GEMM
cannot take the epilogue (a residual add after the bias)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import nnhal
from nnhal.conformance.tolerance import assert_within_bound, matmul_bound, unit_roundoff
from nnhal.device.cpu import native
from nnhal.hostkernels import _scratch
from tests.conftest import make_model, vinfo

pytestmark = pytest.mark.skipif(not native.available(), reason="the GEMM epilogue is the native kernels'")

U = unit_roundoff(np.float32)
SLOPE = 1.5        # the largest |d act / dx| of these activations (HardSwish at x = 3): how an input error grows


def _act64(kind: str, h: np.ndarray) -> np.ndarray:
    if kind == "relu":
        return np.maximum(h, 0)
    if kind == "clip":
        return np.clip(h, -0.5, 1.25)
    if kind == "sigmoid":
        return 1 / (1 + np.exp(-h))
    if kind == "silu":
        return h / (1 + np.exp(-h))
    if kind == "hardswish":
        return h * np.clip(h + 3, 0, 6) / 6
    raise ValueError(kind)


def _act_nodes(kind: str, x: str, y: str) -> list:
    n = helper.make_node
    if kind == "relu":
        return [n("Relu", [x], [y])]
    if kind == "clip":
        return [n("Clip", [x, "lo", "hi"], [y])]
    if kind == "sigmoid":
        return [n("Sigmoid", [x], [y])]
    if kind == "silu":
        return [n("Sigmoid", [x], ["sg"]), n("Mul", [x, "sg"], [y])]
    return [n("HardSwish", [x], [y])]


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def _run(model, feeds, monkeypatch, checked: bool):
    """The outputs, the plan's steps and how many activation passes ran after a kernel."""
    passes = []
    apply = _scratch.apply_activation

    def counting(y, act, *args):
        passes.append(act.kind)
        return apply(y, act, *args)

    monkeypatch.setattr(_scratch, "apply_activation", counting)
    monkeypatch.setenv("NNHAL_CHECK", "1" if checked else "0")
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = s.run(feeds)
        steps = s.subgraphs[0].device_graph.steps
    return got, steps, passes


@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("kind", ["relu", "clip", "sigmoid", "silu", "hardswish"])
@pytest.mark.parametrize("batch,rows,k,n", [(1, 32, 128, 256), (2, 37, 29, 61), (1, 1, 64, 300), (1, 2, 16, 130)])
def test_matmul_bias_activation_runs_in_the_native_gemm(monkeypatch, checked, kind, batch, rows, k, n):
    rng = np.random.default_rng(rows * 7 + k)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "bias"], ["h"]),
             *_act_nodes(kind, "h", "y")]
    model = make_model(nodes, [vinfo("x", [batch, rows, k])], [vinfo("y", [batch, rows, n])],
                       [_const("w", w), _const("bias", bias), _const("lo", -0.5), _const("hi", 1.25)])
    x = (rng.standard_normal((batch, rows, k)) * 2).astype(np.float32)
    (got,), steps, passes = _run(model, {"x": x}, monkeypatch, checked)
    assert [st.node.op_type for st in steps] == ["MatMul"]
    assert passes == []                         # the activation ran inside the native GEMM
    h = x.astype(np.float64) @ w + bias
    want = _act64(kind, h)
    # the product's sums and the bias add, grown by the activation's slope, plus the activation's own roundings
    bound = SLOPE * (matmul_bound(x, w) + 2 * U * np.abs(h)) + 16 * U * (np.abs(h) + np.abs(want)) + 4 * U
    assert_within_bound(got, want, bound)


@pytest.mark.parametrize("checked", [False, True])
def test_a_runtime_b_takes_the_activation_in_the_gemm_too(monkeypatch, checked):
    """B an input (not prepared once): parallel.gemm's call with the activation record."""
    rng = np.random.default_rng(5)
    bias = rng.standard_normal(96).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "bias"], ["h"]),
             *_act_nodes("silu", "h", "y")]
    model = make_model(nodes, [vinfo("x", [48, 64]), vinfo("w", [64, 96])], [vinfo("y", [48, 96])],
                       [_const("bias", bias)])
    x = rng.standard_normal((48, 64)).astype(np.float32)
    w = (rng.standard_normal((64, 96)) / 8).astype(np.float32)
    (got,), steps, passes = _run(model, {"x": x, "w": w}, monkeypatch, checked)
    assert [st.node.op_type for st in steps] == ["MatMul"] and passes == []
    h = x.astype(np.float64) @ w + bias
    want = _act64("silu", h)
    bound = SLOPE * (matmul_bound(x, w) + 2 * U * np.abs(h)) + 16 * U * (np.abs(h) + np.abs(want)) + 4 * U
    assert_within_bound(got, want, bound)


@pytest.mark.parametrize("checked", [False, True])
def test_a_residual_after_the_bias_keeps_the_activation_as_a_pass(monkeypatch, checked):
    """act(x @ w + b + r): the residual add follows the bias, so the activation cannot run in the GEMM; it runs
    once, after the epilogue."""
    rng = np.random.default_rng(6)
    w = (rng.standard_normal((64, 80)) / 8).astype(np.float32)
    bias = rng.standard_normal(80).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "bias"], ["hb"]),
             helper.make_node("Add", ["hb", "r"], ["h"]), *_act_nodes("sigmoid", "h", "y")]
    model = make_model(nodes, [vinfo("x", [1, 40, 64]), vinfo("r", [1, 40, 80])], [vinfo("y", [1, 40, 80])],
                       [_const("w", w), _const("bias", bias)])
    x = rng.standard_normal((1, 40, 64)).astype(np.float32)
    r = rng.standard_normal((1, 40, 80)).astype(np.float32)
    (got,), steps, passes = _run(model, {"x": x, "r": r}, monkeypatch, checked)
    assert [st.node.op_type for st in steps] == ["MatMul"] and passes == ["sigmoid"]
    h = x.astype(np.float64) @ w + bias + r
    want = _act64("sigmoid", h)
    bound = SLOPE * (matmul_bound(x, w) + 3 * U * (np.abs(h) + np.abs(r))) + 16 * U * (np.abs(h) + np.abs(want)) + 4 * U
    assert_within_bound(got, want, bound)


@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("rows", [1, 33])
def test_a_linear_gemm_takes_its_activation_in_the_native_gemm(monkeypatch, checked, rows):
    rng = np.random.default_rng(rows)
    b = (rng.standard_normal((120, 64)) / 8).astype(np.float32)
    c = rng.standard_normal(120).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "b", "c"], ["g"], transB=1), *_act_nodes("hardswish", "g", "y")]
    model = make_model(nodes, [vinfo("x", [rows, 64])], [vinfo("y", [rows, 120])], [_const("b", b), _const("c", c)])
    x = (rng.standard_normal((rows, 64)) * 2).astype(np.float32)
    (got,), steps, passes = _run(model, {"x": x}, monkeypatch, checked)
    assert [st.kernel_name for st in steps] == ["native"] and passes == []
    h = x.astype(np.float64) @ b.T + c
    want = _act64("hardswish", h)
    bound = SLOPE * (matmul_bound(x, b.T) + 2 * U * np.abs(h)) + 16 * U * (np.abs(h) + np.abs(want)) + 4 * U
    assert_within_bound(got, want, bound)
