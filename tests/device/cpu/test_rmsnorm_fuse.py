"""The CPU plan's RMSNorm fusion (device/cpu/rmsnorm_fuse.py) and its native step (native/kernels.c nn_rmsnorm_f32,
kernels/layer_normalization.py RMSNormalizationNative): the native call against a float64 numpy oracle, exported
Llama-style decoder steps (past lengths 0, 1 and more, grouped-query heads, batch 2) against onnxruntime and
onnx.reference, and graphs almost of the fused shape that must keep their separate steps.

Tolerance: the mean square sums ``w`` squares in float32 (relative error about gamma(w)); the square root halves
it and the division adds one rounding, so one normalized value is within about (gamma(w) + 2u) * |x| / rms * |scale|
of the exact one. A decoder's outputs carry such errors through a few layers of products of d terms, hence the
looser bound there (the same form as tests/device/cpu/test_attention_fuse.py's)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.conformance.tolerance import gamma
from nnhal.device.cpu import native

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (pip install -e '.[test]')")
try:
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="the decoders are exported from torch, not installed")

pytestmark = pytest.mark.skipif(not native.available(), reason="the fused RMSNorm step is native")

RNG = np.random.default_rng(41)
U = np.finfo(np.float32).eps / 2


def _oracle(x: np.ndarray, scale: np.ndarray | None, eps: float) -> np.ndarray:
    x64 = x.astype(np.float64)
    y = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
    return y if scale is None else y * scale.astype(np.float64)


@pytest.mark.parametrize("rows,width", [(1, 256), (3, 512), (2, 33), (5, 7), (1, 1)])
@pytest.mark.parametrize("scaled", [True, False])
@pytest.mark.parametrize("inplace", [False, True])
def test_native_rmsnorm_oracle(rows, width, scaled, inplace):
    x = (RNG.standard_normal((rows, width)) * 3).astype(np.float32)
    scale = (RNG.random(width) + 0.5).astype(np.float32) if scaled else None
    want = _oracle(x, scale, 1e-6)
    y = x.copy() if inplace else np.empty_like(x)
    native.rmsnorm(y if inplace else x, y, scale, 1e-6, 2)
    rms = np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True) + 1e-6)
    bound = (gamma(width) + 4 * U) * np.abs(x) / rms * (1.0 if scale is None else scale)
    assert np.all(np.abs(y - want) <= bound + 1e-30)


def test_native_rmsnorm_rejects_bad_arguments():
    x = np.ones((2, 8), np.float32)
    with pytest.raises((TypeError, ValueError)):
        native.rmsnorm(x, np.empty((2, 7), np.float32), None, 1e-6, 1)
    with pytest.raises((TypeError, ValueError)):
        native.rmsnorm(x, np.empty_like(x), np.ones(7, np.float32), 1e-6, 1)
    with pytest.raises((TypeError, ValueError)):
        native.rmsnorm(x.astype(np.float64), np.empty_like(x), None, 1e-6, 1)


def _kernels(s: nnhal.Session) -> list[tuple[str, str]]:
    return [(st.node.op_type, st.kernel_name) for sg in s.subgraphs for st in sg.device_graph.steps]


def _chain_model(width: int, form: str, weight: np.ndarray | None, eps: float = 1e-6, extra_reader: bool = False,
                 axes=(-1,), power: float = 2.0, swap_div: bool = False) -> onnx.ModelProto:
    """x -> (x + 0) -> the RMSNorm chain spelled as ``form`` ("div": Pow/ReduceMean/Add/Sqrt/Div, "rsqrt":
    .../Sqrt/Reciprocal/Mul, "square": Mul(x, x) instead of Pow) [-> Mul(weight)] -> y; ``extra_reader`` makes the
    mean square a second graph output (the chain must then not fuse); ``eps`` may be an array, ``swap_div`` divides
    the root by x."""
    c = {"two": np.array(power, np.float32), "eps": np.asarray(eps, np.float32), "zero": np.array(0, np.float32)}
    nodes = [helper.make_node("Add", ["x", "zero"], ["h"])]
    if form == "square":
        nodes.append(helper.make_node("Mul", ["h", "h"], ["sq"]))
    else:
        nodes.append(helper.make_node("Pow", ["h", "two"], ["sq"]))
    nodes += [helper.make_node("ReduceMean", ["sq"], ["ms"], axes=list(axes), keepdims=1),
              helper.make_node("Add", ["ms", "eps"], ["mse"]),
              helper.make_node("Sqrt", ["mse"], ["rms"])]
    if form == "rsqrt":
        nodes += [helper.make_node("Reciprocal", ["rms"], ["inv"]), helper.make_node("Mul", ["h", "inv"], ["n"])]
    else:
        nodes.append(helper.make_node("Div", ["rms", "h"] if swap_div else ["h", "rms"], ["n"]))
    out = "n"
    if weight is not None:
        c["w"] = weight
        nodes.append(helper.make_node("Mul", ["w", "n"], ["y"]))
        out = "y"
    outputs = [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("ms", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "rms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, width])],
                              outputs, [numpy_helper.from_array(v, k) for k, v in c.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("form", ["div", "rsqrt", "square"])
@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("width", [64, 37])
def test_chain_fuses(form, weighted, width):
    weight = (RNG.random(width) + 0.5).astype(np.float32) if weighted else None
    model = _chain_model(width, form, weight)
    x = (RNG.standard_normal((2, 3, width)) * 2).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = s.run({"x": x})[0]
        plan = _kernels(s)
    assert ("RMSNormalization", "native") in plan
    assert not {op for op, _ in plan} & {"Pow", "ReduceMean", "Sqrt", "Div", "Reciprocal"}
    rms = np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True) + 1e-6)
    bound = 2 * (gamma(width) + 4 * U) * np.abs(x) / rms * (1.0 if weight is None else weight)
    assert np.all(np.abs(got - want) <= bound + 1e-30)


@pytest.mark.parametrize("case", ["extra_reader", "other_axis", "cube", "eps_tensor", "swap_div", "weight_full_shape"])
def test_near_miss_keeps_steps(case):
    """Graphs one detail away from the chain: a reused intermediate, the mean over another axis, x^3, an epsilon
    that is not one scalar, the root divided by x, a weight that varies along more than the last axis. The chain
    does not fuse (the weight case keeps at least its Mul); each matches onnx.reference."""
    width = 16
    kw: dict = {}
    weight = (RNG.random(width) + 0.5).astype(np.float32)
    if case == "extra_reader":
        kw["extra_reader"] = True
    elif case == "other_axis":
        kw["axes"] = (1,)
    elif case == "cube":
        kw["power"] = 3.0
    elif case == "eps_tensor":
        kw["eps"] = np.array([[1e-6], [1e-5], [1e-4]], np.float32)
    elif case == "swap_div":
        kw["swap_div"] = True
    else:
        weight = (RNG.random((3, width)) + 0.5).astype(np.float32)
    model = _chain_model(width, "div", weight, **kw)
    x = RNG.standard_normal((2, 3, width)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = s.run({"x": x})
        plan = _kernels(s)
    ops = [op for op, _ in plan]
    if case == "weight_full_shape":     # the chain without its weight may fuse; the weight stays a Mul
        assert "Mul" in ops
    else:
        assert "RMSNormalization" not in ops
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@needs_torch
@pytest.mark.parametrize("past", [0, 1, 17])
@pytest.mark.parametrize("heads,kv_heads,batch", [(4, 4, 1), (8, 2, 1), (4, 1, 2)])
def test_llama_decoder_step(past, heads, kv_heads, batch):
    """A Llama-style decode step (RMSNorm, rotary, SwiGLU, grouped-query cache) against onnxruntime and
    onnx.reference: every RMSNorm fused, the logits and presents within the products' rounding."""
    from tests.device.cpu import kv_decoders

    model, feeds = kv_decoders.export(llama=True, d=64, heads=heads, kv_heads=kv_heads, layers=2, past=past,
                                      batch=batch, seed=past + heads)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    ref = ReferenceEvaluator(onnx.load_from_string(model)).run(None, feeds)
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = s.run(feeds)
        plan = _kernels(s)
    assert [op for op, _ in plan].count("RMSNormalization") == 4
    assert not {op for op, _ in plan} & {"Pow", "ReduceMean", "Sqrt"}
    bound = 64 * (gamma(64 * 2 + past) * 64 * 9) + 1e-5
    for g, w, r in zip(got, want, ref):
        assert g.shape == w.shape
        scale = max(1.0, float(np.abs(w).max()))
        assert np.abs(g - w).max() <= bound * scale
        assert np.abs(g - r).max() <= bound * scale
