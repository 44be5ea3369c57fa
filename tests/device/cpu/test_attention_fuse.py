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


def _attention23(shapes, mask=None, **attrs) -> bytes:
    from onnx import TensorProto, helper

    if len(shapes[0]) == 4:
        out = list(shapes[0][:-1]) + [shapes[2][-1]]
    else:
        out = list(shapes[0][:-1]) + [shapes[2][-1] // attrs["kv_num_heads"] * attrs["q_num_heads"]]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in zip("qkv", shapes)]
    names = ["q", "k", "v"]
    if mask is not None:
        kind = TensorProto.BOOL if mask.dtype == np.bool_ else TensorProto.FLOAT
        inputs.append(helper.make_tensor_value_info("mask", kind, list(mask.shape)))
        names.append("mask")
    graph = helper.make_graph([helper.make_node("Attention", names, ["y"], **attrs)], "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    return model.SerializeToString()


_BOOL = RNG.random((2, 1, 7, 11)) < 0.6
_BOOL[0, 0, 3] = False          # a query row with every key masked: the op's zeros
_FLOAT = np.where(RNG.random((7, 11)) < 0.3, -np.inf, RNG.standard_normal((7, 11))).astype(np.float32)
_FLOAT[2] = -np.inf


@pytest.mark.parametrize("shapes,attrs,mask", [
    (((2, 3, 7, 8), (2, 3, 11, 8), (2, 3, 11, 5)), {}, None),
    (((1, 4, 9, 16), (1, 4, 9, 16), (1, 4, 9, 16)), {"is_causal": 1}, None),
    (((2, 6, 12), (2, 9, 12), (2, 9, 8)), {"q_num_heads": 4, "kv_num_heads": 4, "scale": 0.3}, None),
    (((1, 5, 12), (1, 5, 12), (1, 5, 12)), {"q_num_heads": 3, "kv_num_heads": 3, "is_causal": 1}, None),
    (((2, 6, 7, 9), (2, 2, 11, 9), (2, 2, 11, 5)), {}, None),                              # grouped, 4-D
    (((2, 7, 54), (2, 11, 18), (2, 11, 10)), {"q_num_heads": 6, "kv_num_heads": 2}, None),  # grouped, 3-D
    (((2, 6, 7, 9), (2, 2, 11, 9), (2, 2, 11, 5)), {}, _BOOL),
    (((2, 3, 7, 8), (2, 3, 11, 8), (2, 3, 11, 5)), {}, _FLOAT),
    (((2, 3, 7, 8), (2, 3, 7, 8), (2, 3, 7, 5)), {"is_causal": 1}, _FLOAT[:, :7]),
])
def test_onnx_attention_op_native(shapes, attrs, mask):
    """The opset-23 Attention op on the native step, against onnx's reference implementation: grouped key/value
    heads, bool and float masks with fully masked rows (the op's zeros), causal with a mask."""
    from onnx.reference import ReferenceEvaluator

    model = _attention23(shapes, mask, **attrs)
    feeds = {n: RNG.standard_normal(s).astype(np.float32) for n, s in zip("qkv", shapes)}
    if mask is not None:
        feeds["mask"] = mask
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got, kernels = _run(model, feeds)
    assert kernels == ["native"]
    d = shapes[0][-1] if len(shapes[0]) == 4 else shapes[0][-1] // attrs["q_num_heads"]
    bound = 64 * (gamma(d + 2) * d * 16 + gamma(shapes[1][-2] + 40)) * 4 + 1e-6
    assert np.abs(got[0] - want).max() <= bound * max(1.0, float(np.abs(want).max()))


@pytest.mark.parametrize("h,hk", [(6, 2), (4, 1), (3, 3)])
@pytest.mark.parametrize("kt", [0, 1])
def test_native_attention_grouped_heads(h, hk, kt):
    """K and V with fewer heads than Q (grouped-query attention): query head i reads kv head i // (h / hk), the
    oracle repeats K and V; the operands are head-split strided views."""
    b, sq, sk, d, dv = 2, 7, 11, 9, 5
    q = RNG.standard_normal((b, sq, h, d)).astype(np.float32).transpose(0, 2, 1, 3)
    k = RNG.standard_normal((b, sk, hk, d)).astype(np.float32).transpose(0, 2, 1, 3)
    v = RNG.standard_normal((b, sk, hk, dv)).astype(np.float32).transpose(0, 2, 1, 3)
    mask = np.broadcast_to(np.where(RNG.random((b, 1, 1, sk)) < 0.3, -np.inf, 0.0).astype(np.float32),
                           (b, h, sq, sk)).copy()
    mask[..., 0] = 0.0
    karg = np.ascontiguousarray(k.swapaxes(-1, -2)) if kt else k
    y = np.full((b, h, sq, dv), np.nan, np.float32)
    native.attention(q, karg, v, mask, y, 0.3, kt, 2)
    g = h // hk
    want = _oracle(q, np.repeat(k, g, axis=1), np.repeat(v, g, axis=1), mask, 0.3)
    assert np.abs(y - want).max() <= _bound(q, k, v, 0.3)


def test_native_attention_rejects_heads_not_dividing():
    q = np.zeros((1, 6, 3, 4), np.float32)
    kv = np.zeros((1, 4, 5, 4), np.float32)
    with pytest.raises(ValueError, match="heads"):
        native.attention(q, kv, kv, None, np.zeros_like(q), 1.0, 0, 1)


def _where_runtime_model(fill: float, cond_shape: list, scores_first: bool) -> bytes:
    """MatMul(q, k^T) / 4 -> Where(run-time condition, scores, fill) -> Softmax -> MatMul(., v), by hand."""
    from onnx import TensorProto, helper, numpy_helper

    shape_q, shape_kt, shape_v = [2, 3, 6, 16], [2, 3, 16, 7], [2, 3, 7, 8]
    where = ["cond", "d", "fill"] if scores_first else ["cond", "fill", "d"]
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Div", ["s", "four"], ["d"]),
             helper.make_node("Where", where, ["w"]),
             helper.make_node("Softmax", ["w"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
              for n, s in (("q", shape_q), ("kt", shape_kt), ("v", shape_v))]
    inputs.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, cond_shape))
    inits = [numpy_helper.from_array(np.float32(4.0), "four"), numpy_helper.from_array(np.float32(fill), "fill")]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 6, 8])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("fill", [-np.inf, -1e4, -1e9, -3.0e38])
@pytest.mark.parametrize("cond_shape", [[2, 1, 1, 7], [2, 1, 6, 7], [7]])
@pytest.mark.parametrize("scores_first", [True, False])
def test_where_runtime_mask(fill, cond_shape, scores_first):
    """A Where whose condition is a graph input (a padding mask, broadcast over heads and rows, or a full
    (B, 1, Sq, Sk) one) fuses: the step makes the additive mask at run time. A finite fill that masks a whole
    row gives that row uniform weights, as the separate Where and Softmax do (checked against onnxruntime);
    -inf masks no whole row here (Softmax's NaN rules then differ between engines)."""
    model = _where_runtime_model(fill, cond_shape, scores_first)
    feeds = {"q": RNG.standard_normal((2, 3, 6, 16)).astype(np.float32),
             "kt": RNG.standard_normal((2, 3, 16, 7)).astype(np.float32),
             "v": RNG.standard_normal((2, 3, 7, 8)).astype(np.float32)}
    cond = RNG.random(cond_shape) < 0.6
    kept_value = scores_first
    cond[..., 0] = kept_value
    if fill != -np.inf and len(cond_shape) == 4:
        cond[1, ..., :] = not kept_value        # batch 1's rows all masked
    feeds["cond"] = cond
    kernels = _check(model, feeds, 16, 7)
    assert "native attention" in kernels


def test_where_runtime_mild_fill_keeps_old_path():
    """A run-time Where with a mild fill (-1) is not an additive mask: the separate steps stay."""
    feeds = {"q": RNG.standard_normal((2, 3, 6, 16)).astype(np.float32),
             "kt": RNG.standard_normal((2, 3, 16, 7)).astype(np.float32),
             "v": RNG.standard_normal((2, 3, 7, 8)).astype(np.float32), "cond": RNG.random((2, 1, 1, 7)) < 0.5}
    kernels = _check(_where_runtime_model(-1.0, [2, 1, 1, 7], True), feeds, 16, 7)
    assert "native attention" not in kernels


if torch is not None:
    class _Bert(torch.nn.Module):
        """A BERT-style self-attention block with the key-padding mask a graph input: additive
        ``(1 - mask) * -10000`` (B, 1, 1, S), or a bool mask through masked_fill, (B, 1, 1, S) or (B, 1, S, S)."""

        def __init__(self, dim, heads, kind):
            super().__init__()
            self.qkv, self.out = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
            self.heads, self.kind = heads, kind

        def forward(self, x, mask):
            b, n, c = x.shape
            d = c // self.heads
            q, k, v = (t.reshape(b, n, self.heads, d).transpose(1, 2) for t in self.qkv(x).split(c, -1))
            s = q @ k.transpose(-1, -2) / d ** 0.5
            if self.kind == "additive":
                s = s + (1.0 - mask[:, None, None, :].float()) * -10000.0
            elif self.kind == "fill":
                s = s.masked_fill(mask[:, None, None, :] == 0, float("-inf"))
            else:       # a (B, 1, S, S) mask: keys padded and queries padded (finite fill, whole rows masked)
                pair = mask[:, None, :, None] * mask[:, None, None, :]
                s = s.masked_fill(pair == 0, -1e9)
            y = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c)
            return self.out(y)

    class _Llama(torch.nn.Module):
        """A Llama-style block: RoPE on q and k, K/V with fewer heads repeated to the query heads (repeat_kv:
        Unsqueeze/Expand/Reshape, or repeat_interleave), causal SDPA."""

        def __init__(self, dim, heads, kv_heads, repeat):
            super().__init__()
            self.d = dim // heads
            self.q = torch.nn.Linear(dim, dim, bias=False)
            self.kv = torch.nn.Linear(dim, 2 * kv_heads * self.d, bias=False)
            self.o = torch.nn.Linear(dim, dim, bias=False)
            self.heads, self.kv_heads, self.repeat = heads, kv_heads, repeat

        def rope(self, x):
            n, half = x.shape[-2], self.d // 2
            freq = 1.0 / 10000 ** (torch.arange(half, dtype=torch.float32) / half)
            ang = torch.arange(n, dtype=torch.float32)[:, None] * freq[None, :]
            cos, sin = ang.cos(), ang.sin()
            a, b = x[..., :half], x[..., half:2 * half]
            return torch.cat([a * cos - b * sin, a * sin + b * cos, x[..., 2 * half:]], dim=-1)

        def forward(self, x):
            b, n, c = x.shape
            g = self.heads // self.kv_heads
            q = self.rope(self.q(x).view(b, n, self.heads, self.d).transpose(1, 2))
            k, v = self.kv(x).view(b, n, 2, self.kv_heads, self.d).permute(2, 0, 3, 1, 4)
            k = self.rope(k)
            if self.repeat == "expand":
                k = k[:, :, None].expand(b, self.kv_heads, g, n, self.d).reshape(b, self.heads, n, self.d)
                v = v[:, :, None].expand(b, self.kv_heads, g, n, self.d).reshape(b, self.heads, n, self.d)
            else:
                k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o(y.transpose(1, 2).reshape(b, n, c))


    class _LlamaCache(torch.nn.Module):
        """A decoder step with a key-value cache: the new keys and values appended to past ones (B, Hk, P, D),
        then repeated to the query heads (repeat_kv) and attended without a mask; the grown cache is returned."""

        def __init__(self, dim, heads, kv_heads):
            super().__init__()
            self.d, self.heads, self.kv_heads = dim // heads, heads, kv_heads
            self.q = torch.nn.Linear(dim, dim, bias=False)
            self.kv = torch.nn.Linear(dim, 2 * kv_heads * self.d, bias=False)
            self.o = torch.nn.Linear(dim, dim, bias=False)

        def forward(self, x, past_k, past_v):
            b, n, c = x.shape
            g = self.heads // self.kv_heads
            q = self.q(x).view(b, n, self.heads, self.d).transpose(1, 2)
            k, v = self.kv(x).view(b, n, 2, self.kv_heads, self.d).permute(2, 0, 3, 1, 4)
            k, v = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2)
            t = k.shape[2]
            kk = k[:, :, None].expand(b, self.kv_heads, g, t, self.d).reshape(b, self.heads, t, self.d)
            vv = v[:, :, None].expand(b, self.kv_heads, g, t, self.d).reshape(b, self.heads, t, self.d)
            y = torch.nn.functional.scaled_dot_product_attention(q, kk, vv)
            return self.o(y.transpose(1, 2).reshape(b, n, c)), k, v


def _export_dynamic(module, args, names) -> bytes:
    """torch.onnx export with the batch and sequence axes of every input symbolic."""
    buf = io.BytesIO()
    axes = {n: {0: "batch", 1: "seq"} for n in names}
    torch.onnx.export(module, args, buf, input_names=names, output_names=["y"], opset_version=17, dynamo=False,
                      dynamic_axes=axes | {"y": {0: "batch", 1: "seq"}})
    return buf.getvalue()


def _check_lengths(model: bytes, make_feeds, lengths, depth: int) -> list[list[str]]:
    """Runs one prepared session over several (batch, length) inputs (nnhal prepares the graph again when the
    input shapes change), each against onnxruntime; the plans' (op, kernel name) per run."""
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    plans = []
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        for batch, n in lengths:
            feeds = make_feeds(batch, n)
            want = oracle.run(None, feeds)
            got = s.run(feeds)
            bound = 64 * (gamma(depth + 2) * depth * 9 + gamma(n + 40)) * 3 + 1e-5
            for g, w in zip(got, want):
                assert np.abs(g - w).max() <= bound * max(1.0, float(np.abs(w).max())), (batch, n)
            plans.append([(st.node.op_type, st.kernel_name) for sg in s.subgraphs for st in sg.device_graph.steps])
    return plans


LENGTHS = [(2, 9), (1, 5), (2, 17), (2, 1)]


@needs_torch
@pytest.mark.parametrize("kind", ["additive", "fill", "pair"])
def test_bert_runtime_mask_dynamic(kind):
    """A BERT-style block (head dim 15) exported with symbolic batch and sequence axes and its padding mask a
    graph input: every (batch, length) fuses and matches onnxruntime, padded keys (and, for the pair mask,
    padded query rows whose keys are all masked) included."""
    torch.manual_seed(3)
    module = _Bert(60, 4, kind).eval()
    x = torch.randn(2, 9, 60)
    mask = torch.ones(2, 9, dtype=torch.int64)
    model = _export_dynamic(module, (x, mask), ["x", "mask"])

    def feeds(batch, n):
        m = np.ones((batch, n), np.int64)
        if n > 2:
            m[-1, -(n // 3):] = 0       # the last sequence padded
        return {"x": RNG.standard_normal((batch, n, 60)).astype(np.float32), "mask": m}

    for plan in _check_lengths(model, feeds, LENGTHS, 15):
        assert ("FusedAttention", "native attention") in plan


@needs_torch
@pytest.mark.parametrize("repeat", ["expand", "interleave"])
@pytest.mark.parametrize("heads,kv_heads", [(6, 2), (4, 1)])
def test_llama_grouped_query_dynamic(repeat, heads, kv_heads):
    """A Llama-style block (RoPE, repeated K/V heads, causal, head dim 9 or 7+ odd) with symbolic batch and
    sequence: the step fuses, reads each kv head once (the repeat's Expand or Tile, or the row gather the
    optimizer made of it, is gone from the plan) and matches onnxruntime over several lengths."""
    torch.manual_seed(4)
    dim = 54 if heads == 6 else 28
    module = _Llama(dim, heads, kv_heads, repeat).eval()
    model = _export_dynamic(module, (torch.randn(2, 9, dim),), ["x"])
    plans = _check_lengths(model, lambda batch, n: {"x": RNG.standard_normal((batch, n, dim)).astype(np.float32)},
                           LENGTHS, dim // heads)
    for (_, n), plan in zip(LENGTHS, plans):
        assert ("FusedAttention", "native attention") in plan
        if n > 1:   # at length 1 the k transpose is a reshape step: the repeat stays (docs/cpu-device.md)
            assert not {op for op, _ in plan} & {"Expand", "Tile", "Softmax"}


@needs_torch
def test_llama_grouped_query_cache():
    """A grouped-query decoder step with a key-value cache (symbolic batch, new and past lengths): fused, the
    repeat folded, against onnxruntime for one and three new tokens after 7, 30 and 12 cached ones."""
    torch.manual_seed(5)
    module = _LlamaCache(54, 6, 2).eval()
    buf = io.BytesIO()
    cache = {0: "batch", 2: "past"}
    torch.onnx.export(module, (torch.randn(2, 1, 54), torch.randn(2, 2, 7, 9), torch.randn(2, 2, 7, 9)), buf,
                      input_names=["x", "pk", "pv"], output_names=["y", "k", "v"], opset_version=17, dynamo=False,
                      dynamic_axes={"x": {0: "batch", 1: "seq"}, "pk": cache, "pv": cache})

    def feeds(batch, n):
        past = {1: 7, 3: 12}.get(n, 30) if batch == 2 else 30
        return {"x": RNG.standard_normal((batch, n, 54)).astype(np.float32),
                "pk": RNG.standard_normal((batch, 2, past, 9)).astype(np.float32),
                "pv": RNG.standard_normal((batch, 2, past, 9)).astype(np.float32)}

    for plan in _check_lengths(buf.getvalue(), feeds, [(2, 1), (1, 1), (2, 3)], 9):
        assert ("FusedAttention", "native attention") in plan
        assert not {op for op, _ in plan} & {"Expand", "Tile", "Softmax"}


@needs_torch
def test_runtime_mask_threads():
    """One prepared session run from four threads at once with different padding masks (the run-time mask is
    per-call state): each result matches onnxruntime's for its own feeds."""
    from concurrent.futures import ThreadPoolExecutor

    torch.manual_seed(6)
    module = _Bert(60, 4, "pair").eval()
    model = _export(module, (torch.randn(2, 9, 60), torch.ones(2, 9, dtype=torch.int64)), ["x", "mask"])
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feeds = []
    for i in range(8):
        m = np.ones((2, 9), np.int64)
        m[i % 2, 9 - i:] = 0
        feeds.append({"x": RNG.standard_normal((2, 9, 60)).astype(np.float32), "mask": m})
    bound = 64 * (gamma(17) * 15 * 9 + gamma(49)) * 3 + 1e-5
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        s.run(feeds[0])
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda f: [g.copy() for g in s.run(f)], feeds * 3))
        assert ("native attention" in [st.kernel_name for sg in s.subgraphs for st in sg.device_graph.steps])
    for f, g in zip(feeds * 3, got):
        w = oracle.run(None, f)[0]
        assert np.abs(g[0] - w).max() <= bound * max(1.0, float(np.abs(w).max()))
