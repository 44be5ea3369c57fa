"""Seeded decoder-only transformers with a KV cache for the decode-step tests (issue 27, kv round): a GPT-2 style
(LayerNorm, Gelu MLP, learned positions) and a Llama style (RMSNorm as exported element-wise ops, SwiGLU, rotary
embedding as exported Mul/Neg/Concat/Slice, optional grouped-query heads), exported by torch.onnx at opset 17 with
each layer's past K and V as graph inputs and the present K and V as graph outputs; one new token a step."""
import io
import math

import torch


class _Block(torch.nn.Module):
    def __init__(self, d, h, hk, llama):
        super().__init__()
        self.d, self.h, self.hk, self.hd, self.llama = d, h, hk, d // h, llama
        self.q = torch.nn.Linear(d, d, bias=not llama)
        self.k = torch.nn.Linear(d, hk * self.hd, bias=not llama)
        self.v = torch.nn.Linear(d, hk * self.hd, bias=not llama)
        self.o = torch.nn.Linear(d, d, bias=not llama)
        if llama:
            self.n1 = torch.nn.Parameter(torch.rand(d) + 0.5)
            self.n2 = torch.nn.Parameter(torch.rand(d) + 0.5)
            self.gate = torch.nn.Linear(d, 2 * d, bias=False)
            self.up = torch.nn.Linear(d, 2 * d, bias=False)
            self.down = torch.nn.Linear(2 * d, d, bias=False)
        else:
            self.n1 = torch.nn.LayerNorm(d)
            self.n2 = torch.nn.LayerNorm(d)
            self.fc = torch.nn.Linear(d, 4 * d)
            self.proj = torch.nn.Linear(4 * d, d)

    def norm(self, x, which):
        w = self.n1 if which == 1 else self.n2
        if not self.llama:
            return w(x)
        var = x.pow(2).mean(-1, keepdim=True)
        return x / torch.sqrt(var + 1e-6) * w

    @staticmethod
    def rope(x, cos, sin):
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        rot = torch.cat((-x2, x1), dim=-1)
        return x * cos + rot * sin

    def forward(self, x, pk, pv, cos, sin):
        b, t, _ = x.shape
        y = self.norm(x, 1)
        q = self.q(y).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.k(y).view(b, t, self.hk, self.hd).transpose(1, 2)
        v = self.v(y).view(b, t, self.hk, self.hd).transpose(1, 2)
        if self.llama:
            q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
        k = torch.cat((pk, k), dim=2)
        v = torch.cat((pv, v), dim=2)
        present = (k, v)
        if self.hk != self.h:
            g = self.h // self.hk
            k = k[:, :, None].expand(b, self.hk, g, k.shape[2], self.hd).reshape(b, self.h, k.shape[2], self.hd)
            v = v[:, :, None].expand(b, self.hk, g, v.shape[2], self.hd).reshape(b, self.h, v.shape[2], self.hd)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
        a = torch.softmax(s, dim=-1) @ v
        a = a.transpose(1, 2).reshape(b, t, self.d)
        x = x + self.o(a)
        y = self.norm(x, 2)
        if self.llama:
            x = x + self.down(torch.nn.functional.silu(self.gate(y)) * self.up(y))
        else:
            x = x + self.proj(torch.nn.functional.gelu(self.fc(y)))
        return x, present


class Decoder(torch.nn.Module):
    """GPT-2 style (llama=False) or Llama style (llama=True) decode step."""

    def __init__(self, d=256, heads=4, kv_heads=None, layers=4, vocab=512, llama=False, max_pos=512):
        super().__init__()
        self.llama, self.layers = llama, layers
        self.hd = d // heads
        self.emb = torch.nn.Embedding(vocab, d)
        if not llama:
            self.pos = torch.nn.Embedding(max_pos, d)
        self.blocks = torch.nn.ModuleList(_Block(d, heads, kv_heads or heads, llama) for _ in range(layers))
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, ids, position, *past):
        x = self.emb(ids)
        cos = sin = None
        if self.llama:
            inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2, dtype=torch.float32) / self.hd))
            ang = position.to(torch.float32)[..., None] * inv
            ang = torch.cat((ang, ang), dim=-1)[:, None]
            cos, sin = torch.cos(ang), torch.sin(ang)
        else:
            x = x + self.pos(position)
        presents = []
        for i, blk in enumerate(self.blocks):
            x, (k, v) = blk(x, past[2 * i], past[2 * i + 1], cos, sin)
            presents += [k, v]
        return (self.head(x), *presents)


def export(llama=False, d=256, heads=4, kv_heads=None, layers=4, past=64, batch=1, seed=0, dynamic=False):
    """Return (onnx bytes, feeds) for one decode step with `past` cached positions."""
    torch.manual_seed(seed)
    m = Decoder(d, heads, kv_heads, layers, llama=llama).eval()
    hk = kv_heads or heads
    ids = torch.randint(0, 512, (batch, 1))
    pos = torch.full((batch, 1), past, dtype=torch.int64)
    pkv = [torch.randn(batch, hk, past, d // heads) for _ in range(2 * layers)]
    names = ["ids", "position"] + [f"past_{i}" for i in range(2 * layers)]
    outs = ["logits"] + [f"present_{i}" for i in range(2 * layers)]
    dyn = None
    if dynamic:
        dyn = {f"past_{i}": {2: "p"} for i in range(2 * layers)}
    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(m, (ids, pos, *pkv), buf, input_names=names, output_names=outs, opset_version=17,
                          dynamo=False, dynamic_axes=dyn)
    feeds = {"ids": ids.numpy(), "position": pos.numpy()}
    feeds.update({f"past_{i}": t.numpy() for i, t in enumerate(pkv)})
    return buf.getvalue(), feeds
