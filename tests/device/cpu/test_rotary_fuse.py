"""The CPU plan's rotary-embedding fusion (device/cpu/rotary_fuse.py) and its native step (native/kernels.c
nn_rotary_f32, kernels/rotary.py RotaryNative): the native call against a float64 oracle, the exported rotate-half
chain against onnx.reference (fused, and one detail off so that it must not fuse), and whole decode steps of
seeded GPT-2 and Llama style decoders with a KV cache (tests/device/cpu/kv_decoders.py) against onnxruntime and
onnx.reference at past lengths 0, 1 and more, grouped-query heads and batch 2, on 2 threads.

Tolerance: the step computes x * c + r * s, two products and a sum in float32 as the chain does (three roundings,
possibly one fewer under a fused multiply-add), so each element is within 3u (|x c| + |r s|) of the exact value.
A decoder's outputs add the products' reassociation (dot products of d terms, a few layers): the bound of
tests/device/cpu/test_attention_fuse.py's form."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.conformance.tolerance import gamma
from nnhal.device.cpu import native
from nnhal.device.cpu.rotary_fuse import _table_split

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (pip install -e '.[test]')")
try:
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="the decoders are exported from torch, not installed")

pytestmark = pytest.mark.skipif(not native.available(), reason="the fused rotary step is native")

RNG = np.random.default_rng(43)
U = np.finfo(np.float32).eps / 2


def _rotate(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


@pytest.mark.parametrize("x_shape,t_shape", [((1, 4, 1, 16), (1, 1, 1, 16)), ((2, 4, 3, 8), (2, 1, 3, 8)),
                                             ((2, 3, 5, 6), (5, 6)), ((3, 2, 2), (3, 1, 2)), ((1, 2), (1, 2))])
def test_native_rotary_oracle(x_shape, t_shape):
    x = RNG.standard_normal(x_shape).astype(np.float32)
    c, s = (RNG.standard_normal(t_shape).astype(np.float32) for _ in range(2))
    x64 = x.astype(np.float64)
    want = x64 * c + _rotate(x64) * s
    mid, inner = _table_split(x_shape, t_shape)
    y = np.empty_like(x)
    native.rotary(x, c, s, y, mid, inner, 2)
    bound = 3 * U * (np.abs(x64 * c) + np.abs(_rotate(x64) * s))
    assert np.all(np.abs(y - want) <= bound + 1e-30)


def test_native_rotary_rejects_bad_arguments():
    x = np.ones((2, 3, 4), np.float32)
    t = np.ones((2, 1, 4), np.float32)
    with pytest.raises(ValueError):
        native.rotary(np.ones((2, 3, 5), np.float32), t, t, np.empty((2, 3, 5), np.float32), 3, 1, 1)
    with pytest.raises(ValueError):     # the table is too small for mid = 1
        native.rotary(x, t, t, np.empty_like(x), 1, 1, 1)
    with pytest.raises(ValueError):     # y is x
        native.rotary(x, t, t, x, 3, 1, 1)
    with pytest.raises(ValueError):
        native.rotary(x, t, t, np.empty_like(x), 4, 1, 1)


def test_table_split():
    assert _table_split((1, 8, 1, 64), (1, 1, 1, 64)) == (8, 1)
    assert _table_split((2, 8, 3, 64), (2, 1, 3, 64)) == (8, 3)
    assert _table_split((2, 8, 3, 64), (3, 64)) == (16, 3)
    assert _table_split((2, 8, 3, 64), (2, 8, 3, 64)) == (1, 48)
    assert _table_split((2, 8, 3, 64), (1, 8, 1, 64)) is None       # broadcast axes not one block
    assert _table_split((2, 8, 3, 64), (2, 1, 3, 32)) is None


def _kernels(s: nnhal.Session) -> list[tuple[str, str]]:
    return [(st.node.op_type, st.kernel_name) for sg in s.subgraphs for st in sg.device_graph.steps]


def _rope_model(x_shape, t_shape, lo=None, hi=None, neg_second=True, sin_on_x=False) -> onnx.ModelProto:
    """x -> (x + 0) -> Slice halves -> Neg -> Concat -> Mul(sin) + Mul(x, cos) -> y; ``lo``/``hi`` override the
    slices' (start, end), ``neg_second=False`` negates the first half instead, ``sin_on_x`` multiplies x (not the
    rotated copy) by sin: near misses that must not fuse."""
    d = x_shape[-1]
    h = d // 2
    lo, hi = lo or (0, h), hi or (h, 2 ** 31 - 1)
    c = {"zero": np.array(0, np.float32), "a": np.array([-1], np.int64),
         "lo_s": np.array([lo[0]], np.int64), "lo_e": np.array([lo[1]], np.int64),
         "hi_s": np.array([hi[0]], np.int64), "hi_e": np.array([hi[1]], np.int64)}
    first, second = ("x1", "x2") if neg_second else ("x2", "x1")
    nodes = [helper.make_node("Add", ["x", "zero"], ["h"]),
             helper.make_node("Slice", ["h", "lo_s", "lo_e", "a"], ["x1"]),
             helper.make_node("Slice", ["h", "hi_s", "hi_e", "a"], ["x2"]),
             helper.make_node("Neg", [second], ["n"]),
             helper.make_node("Concat", ["n", first], ["r"], axis=-1),
             helper.make_node("Mul", ["h", "cos"], ["a1"]),
             helper.make_node("Mul", ["h" if sin_on_x else "r", "sin"], ["a2"]),
             helper.make_node("Add", ["a1", "a2"] if not sin_on_x else ["a1", "r"], ["y0"]),
             helper.make_node("Add", ["y0", "a2"] if sin_on_x else ["y0", "zero"], ["y"])]
    graph = helper.make_graph(
        nodes, "rope",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape)),
         helper.make_tensor_value_info("cos", TensorProto.FLOAT, list(t_shape)),
         helper.make_tensor_value_info("sin", TensorProto.FLOAT, list(t_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in c.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(x_shape, t_shape):
    return {"x": RNG.standard_normal(x_shape).astype(np.float32),
            "cos": RNG.standard_normal(t_shape).astype(np.float32),
            "sin": RNG.standard_normal(t_shape).astype(np.float32)}


@pytest.mark.parametrize("x_shape,t_shape", [((1, 4, 1, 16), (1, 1, 1, 16)), ((2, 4, 3, 8), (2, 1, 3, 8)),
                                             ((2, 3, 5, 6), (5, 6))])
def test_chain_fuses(x_shape, t_shape):
    model = _rope_model(x_shape, t_shape)
    feeds = _feeds(x_shape, t_shape)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = s.run(feeds)[0]
        plan = _kernels(s)
    assert ("RotaryHalf", "native rotary") in plan
    assert not {op for op, _ in plan} & {"Slice", "Neg", "Concat"}
    x, c, si = (feeds[k].astype(np.float64) for k in ("x", "cos", "sin"))
    bound = 6 * U * (np.abs(x * c) + np.abs(_rotate(x) * si))
    assert np.all(np.abs(got - want) <= bound + 1e-30)


@pytest.mark.parametrize("case", ["uneven_slice", "neg_first", "sin_on_x", "table_blocks"])
def test_near_miss_keeps_steps(case):
    """One detail off the rotate-half chain: slices that do not halve the axis, the first half negated, sin on x
    rather than on the rotated copy, a table broadcast over two separate blocks of axes. None fuses; each matches
    onnx.reference."""
    x_shape, t_shape, kw = (2, 4, 3, 8), (2, 1, 3, 8), {}
    if case == "uneven_slice":
        kw = {"lo": (0, 3), "hi": (3, 8)}
    elif case == "neg_first":
        kw = {"neg_second": False}
    elif case == "sin_on_x":
        kw = {"sin_on_x": True}
    else:
        t_shape = (1, 4, 1, 8)
    model = _rope_model(x_shape, t_shape, **kw)
    feeds = _feeds(x_shape, t_shape)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = s.run(feeds)[0]
        plan = _kernels(s)
    assert "RotaryHalf" not in {op for op, _ in plan}
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _decoder_check(model: bytes, feeds: dict, d: int, past: int) -> list[tuple[str, str]]:
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    ref = ReferenceEvaluator(onnx.load_from_string(model)).run(None, feeds)
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = s.run(feeds)
        again = s.run(feeds)
        plan = _kernels(s)
    bound = 64 * (gamma(4 * d + past) * d * 9) + 1e-5
    for g, a, w, r in zip(got, again, want, ref):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, a)
        scale = max(1.0, float(np.abs(w).max()))
        assert np.abs(g - w).max() <= bound * scale
        assert np.abs(g - r).max() <= bound * scale
    return plan


@needs_torch
@pytest.mark.parametrize("past", [0, 1, 17])
@pytest.mark.parametrize("heads,kv_heads,batch", [(4, 4, 1), (8, 2, 1), (4, 1, 2)])
def test_llama_decoder_step(past, heads, kv_heads, batch):
    """A Llama-style decode step: every rotary chain and RMSNorm fused, attention one native step, the logits and
    presents within the products' rounding of onnxruntime's and onnx.reference's."""
    from tests.device.cpu import kv_decoders

    model, feeds = kv_decoders.export(llama=True, d=64, heads=heads, kv_heads=kv_heads, layers=2, past=past,
                                      batch=batch, seed=past + heads)
    plan = _decoder_check(model, feeds, 64, past)
    ops = [op for op, _ in plan]
    assert ops.count("RotaryHalf") == 4 and ops.count("RMSNormalization") == 4
    assert ops.count("FusedAttention") == 2
    assert not set(ops) & {"Neg", "Slice", "Pow", "ReduceMean", "Softmax"}


@needs_torch
@pytest.mark.parametrize("past", [0, 1, 33])
@pytest.mark.parametrize("batch", [1, 2])
def test_gpt_decoder_step(past, batch):
    """A GPT-2 style decode step (LayerNorm, Gelu MLP, learned positions, KV cache): attention one native step,
    against onnxruntime and onnx.reference."""
    from tests.device.cpu import kv_decoders

    model, feeds = kv_decoders.export(llama=False, d=64, heads=4, layers=2, past=past, batch=batch, seed=past)
    plan = _decoder_check(model, feeds, 64, past)
    ops = [op for op, _ in plan]
    assert ops.count("FusedAttention") == 2 and "Softmax" not in ops


@needs_torch
def test_llama_decoder_step_threads():
    """One prepared Llama step run from four threads at once with different tokens, positions and caches (the
    fused steps keep no per-run state): each result matches onnxruntime's for its own feeds."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.device.cpu import kv_decoders

    model, first = kv_decoders.export(llama=True, d=64, heads=8, kv_heads=2, layers=2, past=9, seed=3)
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feeds = []
    for i in range(6):
        f = {k: RNG.standard_normal(v.shape).astype(np.float32) if v.dtype == np.float32 else v.copy()
             for k, v in first.items()}
        f["ids"][:] = i * 7 % 512
        f["position"][:] = 9 + i
        feeds.append(f)
    bound = 64 * (gamma(4 * 64 + 9) * 64 * 9) + 1e-5
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        s.run(feeds[0])
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda f: [g.copy() for g in s.run(f)], feeds * 3))
        assert "RotaryHalf" in {op for op, _ in _kernels(s)}
    for f, g in zip(feeds * 3, got):
        for a, w in zip(g, oracle.run(None, f)):
            assert np.abs(a - w).max() <= bound * max(1.0, float(np.abs(w).max()))
