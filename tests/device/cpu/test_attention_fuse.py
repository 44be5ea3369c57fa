"""The CPU plan's attention fusion (device/cpu/attention_fuse.py) and its native step (native/nn_attention.h,
kernels/attention.py FusedAttentionNative): exported torch attention modules against onnxruntime, the native
call against a float64 numpy oracle, and the fusion's reach (which plans get the step, which keep the old path).

Tolerance: a score is a dot product of D terms (error about gamma(D) times the sum of |q||k| products); softmax
turns an absolute score error e into a relative probability error of about 2e; the output sums Sk products
of probabilities and values (gamma(Sk) of sum |p||v|). Both sides (ours and the oracle) carry such errors."""
from __future__ import annotations

import io

import numpy as np
import pytest

import nnhal
from nnhal.conformance.tolerance import gamma
from nnhal.device.cpu import native

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (pip install -e '.[test]')")
try:
    import torch
except ImportError:     # the native oracle, Where-mask and Attention-op tests need no torch
    torch = None
# the tests of exported torch modules (torch is not among the test extras)
needs_torch = pytest.mark.skipif(torch is None, reason="the attention modules are exported from torch, not installed")

pytestmark = pytest.mark.skipif(not native.available(), reason="the fused attention step is native")

RNG = np.random.default_rng(27)


def _oracle(q, k, v, mask, scale):
    """float64 softmax(q k^T scale + mask) v over the last two axes."""
    s = np.einsum("...id,...jd->...ij", q.astype(np.float64), k.astype(np.float64)) * scale
    if mask is not None:
        s = s + mask.astype(np.float64)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("...ij,...jd->...id", p, v.astype(np.float64))


def _bound(q, k, v, scale):
    """Absolute error bound of the float32 computation (module docstring), per the whole output."""
    d, sk = q.shape[-1], k.shape[-2]
    score_err = gamma(d + 2) * float(np.abs(q).max() * np.abs(k).max()) * d * abs(scale)
    return (2 * score_err + 4 * gamma(sk + 40)) * float(np.abs(v).max()) * 4 + 1e-6


@pytest.mark.parametrize("b,h,sq,sk,d,dv", [(1, 4, 32, 32, 32, 32), (2, 3, 7, 13, 5, 9), (1, 1, 1, 65, 64, 64),
                                            (2, 2, 70, 33, 16, 16)])
@pytest.mark.parametrize("layout", ["plain", "heads", "kt"])
@pytest.mark.parametrize("masked", [False, True])
def test_native_attention_oracle(b, h, sq, sk, d, dv, layout, masked):
    """native.attention on contiguous, head-split (strided) and K^T operands, with a broadcast mask."""
    scale = 1.0 / np.sqrt(d)
    if layout == "heads":       # (B, S, H, D) projections viewed as (B, H, S, D)
        q = RNG.standard_normal((b, sq, h, d)).astype(np.float32).transpose(0, 2, 1, 3)
        k = RNG.standard_normal((b, sk, h, d)).astype(np.float32).transpose(0, 2, 1, 3)
        v = RNG.standard_normal((b, sk, h, dv)).astype(np.float32).transpose(0, 2, 1, 3)
    else:
        q, k, v = (RNG.standard_normal(s).astype(np.float32) for s in ((b, h, sq, d), (b, h, sk, d), (b, h, sk, dv)))
    kt = 0
    karg = k
    if layout == "kt":
        karg, kt = np.ascontiguousarray(k.swapaxes(-1, -2)), 1
    mask = None
    if masked:
        m = np.where(RNG.random((b, 1, 1, sk)) < 0.3, -np.inf, 0.0).astype(np.float32)
        m[..., 0] = 0.0
        mask = np.broadcast_to(m, (b, h, sq, sk))
    y = np.empty((b, sq, h, dv), np.float32)          # written through the (B, H, Sq, Dv) view
    for parts in (1, 3):
        y.fill(np.nan)
        native.attention(q, karg, v, mask, y.transpose(0, 2, 1, 3), scale, kt, parts)
        want = _oracle(q, k, v, mask, scale).transpose(0, 2, 1, 3)
        assert np.abs(y - want).max() <= _bound(q, k, v, scale)


def test_native_attention_rejects_bad_arguments():
    q = np.zeros((1, 2, 3, 4), np.float32)
    with pytest.raises(ValueError, match="attention"):
        native.attention(q, np.zeros((1, 2, 5, 3), np.float32), np.zeros((1, 2, 5, 4), np.float32), None,
                         np.zeros((1, 2, 3, 4), np.float32), 1.0, 0, 1)
    with pytest.raises(ValueError, match="overlap"):
        native.attention(q, q, q, None, q, 1.0, 0, 1)
    with pytest.raises(TypeError):
        native.attention(q.astype(np.float64), q, q, None, np.zeros_like(q), 1.0, 0, 1)


def _export(module, args, names) -> bytes:
    buf = io.BytesIO()
    torch.onnx.export(module, args, buf, input_names=names, opset_version=17, dynamo=False)
    return buf.getvalue()


def _run(model: bytes, feeds: dict) -> tuple[list[np.ndarray], list[str]]:
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = s.run(feeds)
        kernels = [st.kernel_name for sg in s.subgraphs for st in sg.device_graph.steps]
    return got, kernels


if torch is not None:
    class _MHA(torch.nn.Module):
        def __init__(self, dim, heads, mask_kind):
            super().__init__()
            self.att = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
            self.mask_kind = mask_kind

        def forward(self, x, mem, pad):
            if self.mask_kind == "causal":
                n = x.shape[1]
                causal = torch.triu(torch.full((n, mem.shape[1]), float("-inf")), diagonal=1)
                return self.att(x, mem, mem, attn_mask=causal, need_weights=False)[0]
            if self.mask_kind == "padding":
                return self.att(x, mem, mem, key_padding_mask=pad, need_weights=False)[0]
            return self.att(x, mem, mem, need_weights=False)[0]


    class _SDPA(torch.nn.Module):
        def __init__(self, dim, heads, causal):
            super().__init__()
            self.qkv = torch.nn.Linear(dim, 3 * dim)
            self.heads, self.causal = heads, causal

        def forward(self, x):
            b, n, c = x.shape
            q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
            return y.transpose(1, 2).reshape(b, n, c)


def _check(model: bytes, feeds: dict, depth: int, length: int) -> list[str]:
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    got, kernels = _run(model, feeds)
    # the projections' outputs are O(1..3); the bound of the attention core times a margin for the projections
    bound = 64 * (gamma(depth + 2) * depth * 9 + gamma(length + 40)) * 3 + 1e-5
    for g, w in zip(got, want):
        assert np.abs(g - w).max() <= bound * max(1.0, float(np.abs(w).max()))
    return kernels


@needs_torch
@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal"])
@pytest.mark.parametrize("dim,heads,sq,sk,batch", [(128, 4, 16, 32, 1), (60, 4, 9, 9, 2), (36, 4, 5, 11, 2)])
def test_multihead_attention_fused(mask_kind, dim, heads, sq, sk, batch):
    """nn.MultiheadAttention, self (sq == sk) and cross attention, odd head dims (15, 9), batch 2: the fused step
    runs and matches onnxruntime."""
    if mask_kind == "causal" and sq != sk:
        sq = sk
    torch.manual_seed(0)
    module = _MHA(dim, heads, mask_kind).eval()
    x = torch.randn(batch, sq, dim)
    mem = x if sq == sk else torch.randn(batch, sk, dim)
    pad = torch.zeros(batch, sk, dtype=torch.bool)
    pad[:, -2:] = True
    if mask_kind == "padding":
        model = _export(module, (x, mem, pad), ["x", "mem", "pad"])
        feeds = {"x": x.numpy(), "mem": mem.numpy(), "pad": pad.numpy()}
    else:
        model = _export(module, (x, mem, pad), ["x", "mem", "pad"])
        feeds = {"x": x.numpy(), "mem": mem.numpy()}
        names = [i.name for i in ort.InferenceSession(model, providers=["CPUExecutionProvider"]).get_inputs()]
        feeds = {k: v for k, v in feeds.items() if k in names}
    kernels = _check(model, feeds, dim // heads, sk)
    if mask_kind != "padding":      # a boolean padding mask is made at run time: may keep the old path
        assert "native attention" in kernels


@needs_torch
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("batch", [1, 2])
def test_sdpa_fused(causal, batch):
    """scaled_dot_product_attention (q and k^T scaled separately by torch.onnx), causal or not."""
    torch.manual_seed(1)
    module = _SDPA(48, 3, causal).eval()
    x = torch.randn(batch, 12, 48)
    model = _export(module, (x,), ["x"])
    kernels = _check(model, {"x": x.numpy()}, 16, 12)
    assert "native attention" in kernels


@needs_torch
def test_non_matching_keeps_old_path():
    """A Softmax whose scores are read elsewhere (need_weights=True returns them) keeps the separate steps."""
    torch.manual_seed(2)

    class Weights(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.att = torch.nn.MultiheadAttention(32, 2, batch_first=True)

        def forward(self, x):
            y, w = self.att(x, x, x, need_weights=True, average_attn_weights=False)
            return y, w

    x = torch.randn(1, 6, 32)
    model = _export(Weights().eval(), (x,), ["x"])
    kernels = _check(model, {"x": x.numpy()}, 16, 6)
    assert "native attention" not in kernels


def _where_model(fill: float, cond: np.ndarray) -> bytes:
    """MatMul(q, k^T) / 4 -> Where(constant cond, scores, fill) -> Softmax -> MatMul(., v), built by hand."""
    from onnx import TensorProto, helper, numpy_helper

    shape_q, shape_kt, shape_v = [1, 2, 6, 16], [1, 2, 16, 6], [1, 2, 6, 8]
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Div", ["s", "four"], ["d"]),
             helper.make_node("Where", ["cond", "d", "fill"], ["w"]),
             helper.make_node("Softmax", ["w"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
              for n, s in (("q", shape_q), ("kt", shape_kt), ("v", shape_v))]
    inits = [numpy_helper.from_array(np.float32(4.0), "four"), numpy_helper.from_array(np.float32(fill), "fill"),
             numpy_helper.from_array(cond, "cond")]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 6, 8])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("fill,full_row,fused", [(-np.inf, False, True), (-1e9, False, True), (-1e9, True, False),
                                                 (-1.0, False, False)])
def test_where_mask(fill, full_row, fused):
    """A causal Where with a constant condition becomes an additive mask: -inf, or a very negative finite fill when
    no row is fully masked; a fully masked row or a mild fill keeps the old path (the results differ there)."""
    cond = np.tril(np.ones((6, 6), bool))
    if full_row:
        cond[0] = False
    feeds = {"q": RNG.standard_normal((1, 2, 6, 16)).astype(np.float32),
             "kt": RNG.standard_normal((1, 2, 16, 6)).astype(np.float32),
             "v": RNG.standard_normal((1, 2, 6, 8)).astype(np.float32)}
    kernels = _check(_where_model(fill, cond), feeds, 16, 6)
    assert ("native attention" in kernels) == fused


def _attention23(shapes, **attrs) -> bytes:
    from onnx import TensorProto, helper

    out = list(shapes[0][:-1]) + [shapes[2][-1] if len(shapes[0]) == 4 else shapes[2][-1]]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in zip("qkv", shapes)]
    graph = helper.make_graph([helper.make_node("Attention", ["q", "k", "v"], ["y"], **attrs)], "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    return model.SerializeToString()


@pytest.mark.parametrize("shapes,attrs", [
    (((2, 3, 7, 8), (2, 3, 11, 8), (2, 3, 11, 5)), {}),
    (((1, 4, 9, 16), (1, 4, 9, 16), (1, 4, 9, 16)), {"is_causal": 1}),
    (((2, 6, 12), (2, 9, 12), (2, 9, 8)), {"q_num_heads": 4, "kv_num_heads": 4, "scale": 0.3}),
    (((1, 5, 12), (1, 5, 12), (1, 5, 12)), {"q_num_heads": 3, "kv_num_heads": 3, "is_causal": 1}),
])
def test_onnx_attention_op_native(shapes, attrs):
    """The opset-23 Attention op on the native step, against onnx's reference implementation."""
    from onnx.reference import ReferenceEvaluator

    model = _attention23(shapes, **attrs)
    feeds = {n: RNG.standard_normal(s).astype(np.float32) for n, s in zip("qkv", shapes)}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got, kernels = _run(model, feeds)
    assert kernels == ["native"]
    d = shapes[0][-1] if len(shapes[0]) == 4 else shapes[0][-1] // attrs["q_num_heads"]
    bound = 64 * (gamma(d + 2) * d * 16 + gamma(shapes[1][-2] + 40)) * 4 + 1e-6
    assert np.abs(got[0] - want).max() <= bound * max(1.0, float(np.abs(want).max()))
