"""The com.microsoft float attention ops onnxruntime's transformer optimizer writes, Attention (packed QKV
projection) and MultiHeadAttention (separate query, key, value): the host kernels (hostkernels/ms_attention.py,
ms_multi_head_attention.py, forced with force_reference) and the cpu device's native ones (kernels/attention.py)
against onnxruntime, with and without bias and key masks, batch 2, odd head dims; the unsupported forms are
refused with UnsupportedError naming the node.

Tolerance: a score sums D products (gamma(D) times the sum of |q||k|), softmax turns an absolute score error e
into a relative probability error of about 2e, and the output sums L products of probabilities and values
(gamma(L) of sum |p||v|); the Attention op's projection adds gamma(K) relative error to q, k and v. Both engines
carry such errors; the bound is their sum with a margin of 64."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import nnhal
from nnhal.conformance.tolerance import gamma
from nnhal.errors import UnsupportedError
from nnhal.hostkernels.select import force_reference

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (pip install -e '.[test]')")

RNG = np.random.default_rng(28)


def _model(op: str, inputs: list, attrs: dict, out_shape: list) -> bytes:
    """One com.microsoft ``op`` node over ``inputs`` ((name, dtype, shape) or None for an absent one)."""
    names = [i[0] if i else "" for i in inputs]
    while names and not names[-1]:
        names.pop()
    infos = [helper.make_tensor_value_info(n, t, s) for n, t, s in (i for i in inputs if i)]
    node = helper.make_node(op, names, ["y"], domain="com.microsoft", **attrs)
    graph = helper.make_graph([node], "g", infos, [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model.SerializeToString()


def _mask(b: int, total: int, kind: str) -> np.ndarray | None:
    if kind == "lengths":
        return np.array([total, total - 3][:b], np.int32)
    if kind == "raw":
        m = np.ones((b, total), np.int32)
        m[-1, -4:] = 0
        m[0, 1] = 0
        return m
    return None


def _compare(model: bytes, feeds: dict, d: int, total: int, k: int = 0) -> None:
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    scale = max(1.0, float(np.abs(want).max()))
    bound = 64 * (gamma(d + 2) * d * 16 + gamma(total + 40) + gamma(k + 2) * 16) * 4 + 1e-6
    for reference in (True, False):
        if reference:
            with force_reference(), nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
                got = s.run(feeds)[0]
                kernels = [st.kernel_name for sg in s.subgraphs for st in sg.device_graph.steps]
        else:
            with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
                got = s.run(feeds)[0]
                kernels = [st.kernel_name for sg in s.subgraphs for st in sg.device_graph.steps]
        assert kernels == (["reference"] if reference else ["native"])
        assert np.abs(got - want).max() <= bound * scale


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("mask", ["none", "lengths", "raw"])
@pytest.mark.parametrize("b,s,keys,hidden,hv,heads", [(2, 7, 11, 36, 20, 4), (1, 5, 5, 27, 27, 3)])
def test_multi_head_attention(bias, mask, b, s, keys, hidden, hv, heads):
    """MultiHeadAttention, cross (S != L, value hidden != query hidden) and self, head dims 9, 5."""
    m = _mask(b, keys, mask)
    inputs = [("q", TensorProto.FLOAT, [b, s, hidden]), ("k", TensorProto.FLOAT, [b, keys, hidden]),
              ("v", TensorProto.FLOAT, [b, keys, hv]), ("bias", TensorProto.FLOAT, [2 * hidden + hv]) if bias else None,
              ("mask", TensorProto.INT32, list(m.shape)) if m is not None else None]
    feeds = {"q": RNG.standard_normal((b, s, hidden), np.float32),
             "k": RNG.standard_normal((b, keys, hidden), np.float32),
             "v": RNG.standard_normal((b, keys, hv), np.float32)}
    if bias:
        feeds["bias"] = RNG.standard_normal(2 * hidden + hv, np.float32)
    if m is not None:
        feeds["mask"] = m
    _compare(_model("MultiHeadAttention", inputs, {"num_heads": heads}, [b, s, hv]), feeds, hidden // heads, keys)


@pytest.mark.parametrize("mask", ["none", "lengths", "raw"])
@pytest.mark.parametrize("scale", [0.0, 0.2])
def test_attention(mask, scale):
    """Attention: input (2, 9, 24) x weights (24, 3 * 30) + bias, 6 heads of 5, a key mask."""
    b, s, k, hidden, heads = 2, 9, 24, 30, 6
    m = _mask(b, s, mask)
    inputs = [("x", TensorProto.FLOAT, [b, s, k]), ("w", TensorProto.FLOAT, [k, 3 * hidden]),
              ("bias", TensorProto.FLOAT, [3 * hidden]), ("mask", TensorProto.INT32, list(m.shape)) if m is not None
              else None]
    feeds = {"x": RNG.standard_normal((b, s, k), np.float32),
             "w": (RNG.standard_normal((k, 3 * hidden)) / np.sqrt(k)).astype(np.float32),
             "bias": RNG.standard_normal(3 * hidden, np.float32)}
    if m is not None:
        feeds["mask"] = m
    attrs = {"num_heads": heads} | ({"scale": scale} if scale else {})
    _compare(_model("Attention", inputs, attrs, [b, s, hidden]), feeds, hidden // heads, s, k)


@pytest.mark.parametrize("op,inputs,attrs,match", [
    ("Attention", [("x", TensorProto.FLOAT, [1, 4, 8]), ("w", TensorProto.FLOAT, [8, 24]),
                   ("bias", TensorProto.FLOAT, [24])], {"num_heads": 2, "unidirectional": 1}, "unidirectional"),
    ("MultiHeadAttention", [("qkv", TensorProto.FLOAT, [1, 4, 2, 3, 4])], {"num_heads": 2}, "packed"),
])
def test_unsupported_forms(op, inputs, attrs, match):
    model = _model(op, inputs, attrs, [1, 4, 8])
    with pytest.raises(UnsupportedError, match=match):
        with nnhal.Session(model, devices=["cpu"]) as s:
            s.run({n: np.zeros(sh, np.float32) for n, _, sh in inputs})
