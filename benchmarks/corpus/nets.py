"""The corpus architectures in plain torch: small, seeded by the caller, exported by registry.py.

Each builder returns ``(module, example_inputs)``; widths and input sizes are chosen so that one batch-1
run takes a few milliseconds to a few tens of milliseconds on one core.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def cba(ci: int, co: int, k: int = 3, s: int = 1, d: int = 1, g: int = 1, act=nn.ReLU) -> nn.Sequential:
    """Conv + BatchNorm + activation (the padding keeps the size at stride 1)."""
    return nn.Sequential(nn.Conv2d(ci, co, k, s, d * (k - 1) // 2, dilation=d, groups=g, bias=False),
                         nn.BatchNorm2d(co), act() if act else nn.Identity())


class Backbone(nn.Module):
    """Four stages at strides 4, 8, 16, 32 (the last ``dilate`` stages dilated instead of strided)."""

    def __init__(self, widths=(16, 32, 64, 128), act=nn.ReLU, dilate: int = 0):
        super().__init__()
        self.stem = nn.Sequential(cba(3, widths[0], 3, 2, act=act), cba(widths[0], widths[0], 3, 2, act=act))
        stages, ci, d = [], widths[0], 1
        for i, co in enumerate(widths):
            dilated = i >= len(widths) - dilate
            s = 1 if i == 0 or dilated else 2
            d = d * 2 if dilated else 1
            stages.append(nn.Sequential(cba(ci, co, 3, s, act=act), cba(co, co, 3, 1, d, act=act)))
            ci = co
        self.stages = nn.ModuleList(stages)

    def forward(self, x):
        x = self.stem(x)
        feats = []
        for s in self.stages:
            x = s(x)
            feats.append(x)
        return feats


# ------------------------------------------------------------------ detection
class FPN(nn.Module):
    def __init__(self, widths=(16, 32, 64, 128), out=48):
        super().__init__()
        self.body = Backbone(widths)
        self.lateral = nn.ModuleList(nn.Conv2d(c, out, 1) for c in widths[1:])
        self.smooth = nn.ModuleList(nn.Conv2d(out, out, 3, 1, 1) for _ in widths[1:])

    def pyramid(self, x):
        feats = self.body(x)[1:]
        lat = [lay(f) for lay, f in zip(self.lateral, feats)]
        for i in range(len(lat) - 1, 0, -1):
            lat[i - 1] = lat[i - 1] + F.interpolate(lat[i], scale_factor=2.0, mode="nearest")
        return [s(p) for s, p in zip(self.smooth, lat)]

    def forward(self, x):
        return tuple(self.pyramid(x))


class PAN(FPN):
    def __init__(self):
        super().__init__()
        self.down = nn.ModuleList(cba(48, 48, 3, 2) for _ in range(2))
        self.fuse = nn.ModuleList(cba(96, 48, 1) for _ in range(2))

    def forward(self, x):
        p = self.pyramid(x)
        outs = [p[0]]
        for i in range(2):
            outs.append(self.fuse[i](torch.cat([self.down[i](outs[-1]), p[i + 1]], 1)))
        return tuple(outs)


class C2f(nn.Module):
    def __init__(self, ci, co, n=2):
        super().__init__()
        self.c = co // 2
        self.cv1 = cba(ci, co, 1, act=nn.SiLU)
        self.m = nn.ModuleList(nn.Sequential(cba(self.c, self.c, 3, act=nn.SiLU), cba(self.c, self.c, 3, act=nn.SiLU))
                               for _ in range(n))
        self.cv2 = cba((2 + n) * self.c, co, 1, act=nn.SiLU)

    def forward(self, x):
        y = list(self.cv1(x).split((self.c, self.c), 1))
        for m in self.m:
            y.append(y[-1] + m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, ci, co):
        super().__init__()
        self.cv1 = cba(ci, ci // 2, 1, act=nn.SiLU)
        self.cv2 = cba(ci * 2, co, 1, act=nn.SiLU)
        self.m = nn.MaxPool2d(5, 1, 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat([x, y1, y2, self.m(y2)], 1))


class YoloC2f(nn.Module):
    """A YOLOv8-style backbone and neck (C2f, SPPF, SiLU, nearest upsample and concat)."""

    def __init__(self, w=16):
        super().__init__()
        self.b1 = nn.Sequential(cba(3, w, 3, 2, act=nn.SiLU), cba(w, 2 * w, 3, 2, act=nn.SiLU), C2f(2 * w, 2 * w, 1))
        self.b2 = nn.Sequential(cba(2 * w, 4 * w, 3, 2, act=nn.SiLU), C2f(4 * w, 4 * w, 2))
        self.b3 = nn.Sequential(cba(4 * w, 8 * w, 3, 2, act=nn.SiLU), C2f(8 * w, 8 * w, 1), SPPF(8 * w, 8 * w))
        self.n1 = C2f(12 * w, 4 * w, 1)
        self.n2 = C2f(6 * w, 2 * w, 1)

    def forward(self, x):
        x1 = self.b1(x)
        x2 = self.b2(x1)
        x3 = self.b3(x2)
        y2 = self.n1(torch.cat([F.interpolate(x3, scale_factor=2.0), x2], 1))
        y1 = self.n2(torch.cat([F.interpolate(y2, scale_factor=2.0), x1], 1))
        return y1, y2, x3


class AnchorFreeHead(nn.Module):
    """A decoupled anchor-free head (box with DFL softmax, Sigmoid class scores) over three levels,
    flattened and concatenated, then split."""

    def __init__(self, classes=20, reg=8):
        super().__init__()
        self.neck = YoloC2f(12)
        self.reg = reg
        chans = (24, 48, 96)
        self.box = nn.ModuleList(nn.Sequential(cba(c, 32, act=nn.SiLU), nn.Conv2d(32, 4 * reg, 1)) for c in chans)
        self.cls = nn.ModuleList(nn.Sequential(cba(c, 32, act=nn.SiLU), nn.Conv2d(32, classes, 1)) for c in chans)
        self.register_buffer("proj", torch.arange(reg, dtype=torch.float32))

    def forward(self, x):
        outs = []
        for f, b, c in zip(self.neck(x), self.box, self.cls):
            outs.append(torch.cat([b(f), c(f)], 1).flatten(2))
        y = torch.cat(outs, 2)
        box, cls = y.split((4 * self.reg, y.shape[1] - 4 * self.reg), 1)
        box = box.view(1, 4, self.reg, -1).softmax(2)
        box = (box * self.proj.view(1, 1, -1, 1)).sum(2)
        return box, cls.sigmoid()


class FCOSHead(nn.Module):
    """A shared head with GroupNorm over an FPN (FCOS/RetinaNet style): cls, box (exp), centerness."""

    def __init__(self):
        super().__init__()
        self.fpn = FPN()
        self.tower = nn.Sequential(nn.Conv2d(48, 48, 3, 1, 1), nn.GroupNorm(8, 48), nn.ReLU(),
                                   nn.Conv2d(48, 48, 3, 1, 1), nn.GroupNorm(8, 48), nn.ReLU())
        self.cls = nn.Conv2d(48, 10, 3, 1, 1)
        self.box = nn.Conv2d(48, 4, 3, 1, 1)
        self.ctr = nn.Conv2d(48, 1, 3, 1, 1)

    def forward(self, x):
        cls, box, ctr = [], [], []
        for p in self.fpn.pyramid(x):
            t = self.tower(p)
            cls.append(self.cls(t).flatten(2))
            box.append(torch.exp(self.box(t)).flatten(2))
            ctr.append(self.ctr(t).flatten(2))
        return torch.cat(cls, 2).sigmoid(), torch.cat(box, 2), torch.cat(ctr, 2).sigmoid()


# ------------------------------------------------------------------ segmentation
class DeepLabASPP(nn.Module):
    def __init__(self, classes=12):
        super().__init__()
        self.body = Backbone((16, 32, 64, 96), dilate=2)
        self.aspp = nn.ModuleList([cba(96, 48, 1)] + [cba(96, 48, 3, d=r) for r in (6, 12, 18)])
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(96, 48, 1), nn.ReLU())
        self.project = cba(5 * 48, 48, 1)
        self.head = nn.Conv2d(48, classes, 1)

    def forward(self, x):
        f = self.body(x)[-1]
        branches = [a(f) for a in self.aspp]
        branches.append(F.interpolate(self.pool(f), size=f.shape[2:], mode="bilinear", align_corners=False))
        y = self.head(self.project(torch.cat(branches, 1)))
        return F.interpolate(y, size=x.shape[2:], mode="bilinear", align_corners=False)


class UNet(nn.Module):
    """Encoder-decoder with skip concats: ConvTranspose upsampling at the two deep levels, bilinear Resize at
    the two shallow ones."""

    def __init__(self, w=12, classes=3):
        super().__init__()
        chans = [w, 2 * w, 4 * w, 8 * w, 16 * w]
        self.enc = nn.ModuleList()
        ci = 3
        for c in chans:
            self.enc.append(nn.Sequential(cba(ci, c), cba(c, c)))
            ci = c
        self.up = nn.ModuleList()
        self.dec = nn.ModuleList()
        for i in range(4, 0, -1):
            up = nn.ConvTranspose2d(chans[i], chans[i - 1], 2, 2) if i >= 3 else nn.Conv2d(chans[i], chans[i - 1], 1)
            self.up.append(up)
            self.dec.append(nn.Sequential(cba(2 * chans[i - 1], chans[i - 1]), cba(chans[i - 1], chans[i - 1])))
        self.out = nn.Conv2d(w, classes, 1)

    def forward(self, x):
        skips = []
        for i, e in enumerate(self.enc):
            x = e(x if i == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        x = skips.pop()
        for k, (up, dec) in enumerate(zip(self.up, self.dec)):
            x = up(x) if k < 2 else F.interpolate(up(x), scale_factor=2.0, mode="bilinear", align_corners=False)
            x = dec(torch.cat([x, skips.pop()], 1))
        return self.out(x)


class DBNet(nn.Module):
    """DBNet-style OCR text detection: FPN upsample-and-add, every level upsampled to 1/4 and concatenated,
    a head of two ConvTranspose layers and a Sigmoid (probability and threshold maps)."""

    def __init__(self):
        super().__init__()
        self.body = Backbone((16, 24, 48, 96))
        self.inner = nn.ModuleList(nn.Conv2d(c, 32, 1, bias=False) for c in (16, 24, 48, 96))
        self.outc = nn.ModuleList(nn.Conv2d(32, 8, 3, 1, 1, bias=False) for _ in range(4))
        self.heads = nn.ModuleList(nn.Sequential(cba(32, 8), nn.ConvTranspose2d(8, 8, 2, 2), nn.BatchNorm2d(8),
                                                 nn.ReLU(), nn.ConvTranspose2d(8, 1, 2, 2)) for _ in range(2))

    def forward(self, x):
        feats = [i(f) for i, f in zip(self.inner, self.body(x))]
        for i in range(3, 0, -1):
            feats[i - 1] = feats[i - 1] + F.interpolate(feats[i], scale_factor=2.0, mode="nearest")
        ps = [F.interpolate(o(f), scale_factor=2.0 ** i, mode="nearest")
              for i, (o, f) in enumerate(zip(self.outc, feats))]
        fuse = torch.cat(ps[::-1], 1)
        return tuple(torch.sigmoid(h(fuse)) for h in self.heads)


class LRASPP(nn.Module):
    """A mobile segmentation head (LR-ASPP): Hardswish backbone, a Sigmoid-gated branch, bilinear resizes
    with align_corners."""

    def __init__(self, classes=8):
        super().__init__()
        self.body = Backbone((16, 24, 40, 80), act=nn.Hardswish)
        self.cbr = cba(80, 64, 1)
        self.scale = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(80, 64, 1), nn.Sigmoid())
        self.low = nn.Conv2d(24, classes, 1)
        self.high = nn.Conv2d(64, classes, 1)

    def forward(self, x):
        f = self.body(x)
        low, high = f[1], f[3]
        y = self.cbr(high) * self.scale(high)
        y = F.interpolate(y, size=low.shape[2:], mode="bilinear", align_corners=True)
        y = self.low(low) + self.high(y)
        return F.interpolate(y, size=x.shape[2:], mode="bilinear", align_corners=True)


# ------------------------------------------------------------------ recognition
class CRNN(nn.Module):
    def __init__(self, classes=64, hidden=64):
        super().__init__()
        self.cnn = nn.Sequential(cba(1, 32), nn.MaxPool2d(2), cba(32, 64), nn.MaxPool2d(2), cba(64, 96),
                                 nn.MaxPool2d((2, 1)), cba(96, 96), nn.MaxPool2d((4, 1)))
        self.rnn = nn.LSTM(96, hidden, num_layers=2, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, classes)

    def forward(self, x):
        f = self.cnn(x).squeeze(2).permute(2, 0, 1)   # (T, N, C)
        y, _ = self.rnn(f)
        return self.fc(y).log_softmax(-1)


class Block(nn.Module):
    """A pre-norm transformer block (MHSA through nn.MultiheadAttention, GELU MLP)."""

    def __init__(self, dim, heads, mlp=2):
        super().__init__()
        self.n1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.n2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp * dim), nn.GELU(), nn.Linear(mlp * dim, dim))

    def forward(self, x, mask=None):
        h = self.n1(x)
        x = x + self.attn(h, h, h, need_weights=False, attn_mask=mask)[0]
        return x + self.mlp(self.n2(x))


class SVTR(nn.Module):
    """SVTR-style text recognition: conv patch embedding, local mixing (depthwise conv) then global mixing
    (attention), height pooled, a linear CTC head."""

    def __init__(self, dim=96, classes=64):
        super().__init__()
        self.embed = nn.Sequential(cba(3, dim // 2, 3, 2, act=nn.GELU), cba(dim // 2, dim, 3, 2, act=nn.GELU))
        self.local = nn.ModuleList(nn.Sequential(nn.Conv2d(dim, dim, 5, 1, 2, groups=dim), nn.BatchNorm2d(dim),
                                                 nn.GELU(), nn.Conv2d(dim, dim, 1)) for _ in range(2))
        self.merge = cba(dim, dim, 3, (2, 1), act=nn.GELU)
        self.glob = nn.ModuleList(Block(dim, 4) for _ in range(2))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.embed(x)
        for m in self.local:
            x = x + m(x)
        x = self.merge(x)
        n, c, h, w = x.shape
        t = x.flatten(2).transpose(1, 2)
        for b in self.glob:
            t = b(t)
        t = self.norm(t).reshape(n, h, w, c).mean(1)
        return self.head(t).softmax(-1)


class TextCls(nn.Module):
    """A text-direction classifier: small strided CNN, global pooling, two classes."""

    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(cba(3, 16, 3, 2), cba(16, 16, 3, 1, g=16), cba(16, 32, 1), cba(32, 32, 3, 2, g=32),
                               cba(32, 64, 1), cba(64, 64, 3, 2, g=64), cba(64, 128, 1), nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(128, 2)

    def forward(self, x):
        return self.fc(self.f(x).flatten(1)).softmax(-1)


# ------------------------------------------------------------------ audio
class AudioGRU(nn.Module):
    """Conv1d front end over log-mel frames, a two-layer GRU, a per-frame classifier."""

    def __init__(self, mels=40, hidden=96):
        super().__init__()
        self.front = nn.Sequential(nn.Conv1d(mels, 64, 5, 2, 2), nn.BatchNorm1d(64), nn.ReLU(),
                                   nn.Conv1d(64, 64, 3, 1, 1), nn.BatchNorm1d(64), nn.ReLU())
        self.gru = nn.GRU(64, hidden, num_layers=2, batch_first=True)
        self.fc = nn.Linear(hidden, 12)

    def forward(self, x):
        y, _ = self.gru(self.front(x).transpose(1, 2))
        return self.fc(y)


class AudioLSTM(nn.Module):
    """A 2-D conv front end on a spectrogram, an LSTM with explicit initial states, a sigmoid output (VAD)."""

    def __init__(self, hidden=64):
        super().__init__()
        self.front = nn.Sequential(cba(1, 16, 3, (2, 1)), cba(16, 16, 3, (2, 1)), cba(16, 8, 3, (2, 1)))
        self.lstm = nn.LSTM(8 * 8, hidden, batch_first=True)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x, h, c):
        f = self.front(x)                     # (1, 8, 8, T)
        f = f.flatten(1, 2).transpose(1, 2)   # (1, T, 64)
        y, (h, c) = self.lstm(f, (h, c))
        return torch.sigmoid(self.out(y)), h, c


class Conformer(nn.Module):
    """Conformer blocks: half-step FFNs with SiLU, MHSA, a convolution module (GLU, depthwise conv1d,
    BatchNorm, SiLU)."""

    def __init__(self, mels=80, dim=144, heads=4, depth=2):
        super().__init__()
        self.sub = nn.Sequential(nn.Conv2d(1, dim, 3, 2), nn.ReLU(), nn.Conv2d(dim, dim, 3, 2), nn.ReLU())
        self.proj = nn.Linear(dim * (((mels - 1) // 2 - 1) // 2), dim)
        self.blocks = nn.ModuleList()
        for _ in range(depth):
            self.blocks.append(nn.ModuleDict({
                "ff1": nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.SiLU(), nn.Linear(2 * dim, dim)),
                "att": Block(dim, heads),
                "cn": nn.LayerNorm(dim), "pw1": nn.Conv1d(dim, 2 * dim, 1),
                "dw": nn.Conv1d(dim, dim, 15, 1, 7, groups=dim), "bn": nn.BatchNorm1d(dim),
                "pw2": nn.Conv1d(dim, dim, 1),
                "ff2": nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.SiLU(), nn.Linear(2 * dim, dim)),
                "ln": nn.LayerNorm(dim)}))

    def forward(self, x):                      # (1, 1, T, mels)
        x = self.sub(x)
        n, c, t, f = x.shape
        x = self.proj(x.transpose(1, 2).reshape(n, t, c * f))
        for b in self.blocks:
            x = x + 0.5 * b["ff1"](x)
            x = b["att"](x)
            y = b["cn"](x).transpose(1, 2)
            y = F.glu(b["pw1"](y), dim=1)
            y = b["pw2"](F.silu(b["bn"](b["dw"](y))))
            x = x + y.transpose(1, 2)
            x = b["ln"](x + 0.5 * b["ff2"](x))
        return x


# ------------------------------------------------------------------ transformers
class Attention(nn.Module):
    """Multi-head attention written out (as HF exports it): separate q, k, v projections, optional cache."""

    def __init__(self, dim, heads):
        super().__init__()
        self.h, self.d = heads, dim // heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))

    def split(self, x):
        n, t, _ = x.shape
        return x.view(n, t, self.h, self.d).transpose(1, 2)

    def forward(self, x, mem=None, past=None, mask=None):
        src = x if mem is None else mem
        q, k, v = self.split(self.q(x)), self.split(self.k(src)), self.split(self.v(src))
        if past is not None:
            k = torch.cat([past[0], k], 2)
            v = torch.cat([past[1], v], 2)
        a = (q @ k.transpose(-1, -2)) / self.d ** 0.5
        if mask is not None:
            a = a + mask
        y = (a.softmax(-1) @ v).transpose(1, 2).reshape(x.shape)
        return self.o(y), (k, v)


class DecoderLayer(nn.Module):
    def __init__(self, dim, heads, cross=False):
        super().__init__()
        self.n1, self.att = nn.LayerNorm(dim), Attention(dim, heads)
        self.cross = Attention(dim, heads) if cross else None
        self.nc = nn.LayerNorm(dim) if cross else None
        self.n2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x, mem=None, past=None, mask=None):
        y, present = self.att(self.n1(x), past=past, mask=mask)
        x = x + y
        if self.cross is not None:
            x = x + self.cross(self.nc(x), mem=mem)[0]
        return x + self.mlp(self.n2(x)), present


class GPTKV(nn.Module):
    """A decoder-only LM step with a KV cache: one new token, past keys and values per layer as inputs,
    present ones as outputs (GPT-2 style)."""

    def __init__(self, vocab=2048, dim=256, heads=4, depth=4, ctx=256):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim)
        self.layers = nn.ModuleList(DecoderLayer(dim, heads) for _ in range(depth))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids, pos, *past):
        x = self.wte(ids) + self.wpe(pos)
        presents = []
        for i, layer in enumerate(self.layers):
            x, (k, v) = layer(x, past=(past[2 * i], past[2 * i + 1]))
            presents += [k, v]
        return (self.head(self.ln(x)), *presents)


class GPTPrefill(GPTKV):
    """The same decoder over a whole prompt with a causal mask (no cache inputs)."""

    def forward(self, ids):
        t = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(t).unsqueeze(0))
        mask = torch.triu(torch.full((t, t), -1e4), 1)
        for layer in self.layers:
            x, _ = layer(x, mask=mask)
        return self.head(self.ln(x))


class EncDec(nn.Module):
    """A translation-style encoder-decoder (nn.Transformer, post-norm, ReLU) with embeddings and a causal
    target mask."""

    def __init__(self, vocab=1000, dim=128):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.tf = nn.Transformer(dim, 4, 2, 2, 256, dropout=0.0, batch_first=True)
        self.out = nn.Linear(dim, vocab)

    def forward(self, src, tgt):
        t = tgt.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf")), 1)
        return self.out(self.tf(self.emb(src), self.emb(tgt), tgt_mask=mask))


class ViT(nn.Module):
    def __init__(self, size=112, patch=16, dim=192, depth=4, heads=3):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, (size // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, 4) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 100)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x)[:, 0])


class Whisper(nn.Module):
    """Whisper-like: two Conv1d + GELU over log-mel frames, sinusoid-free learned positions, an encoder, and
    a decoder step over a short token prefix with cross-attention."""

    def __init__(self, mels=80, frames=300, dim=192, heads=3, vocab=1024):
        super().__init__()
        self.c1 = nn.Conv1d(mels, dim, 3, 1, 1)
        self.c2 = nn.Conv1d(dim, dim, 3, 2, 1)
        self.pos = nn.Parameter(torch.randn(1, frames // 2, dim) * 0.02)
        self.enc = nn.ModuleList(Block(dim, heads, 4) for _ in range(2))
        self.ln = nn.LayerNorm(dim)
        self.tok = nn.Embedding(vocab, dim)
        self.dec = nn.ModuleList(DecoderLayer(dim, heads, cross=True) for _ in range(2))
        self.lnd = nn.LayerNorm(dim)
        self.vocab = vocab

    def forward(self, mel, tokens):
        x = F.gelu(self.c2(F.gelu(self.c1(mel)))).transpose(1, 2) + self.pos
        for b in self.enc:
            x = b(x)
        mem = self.ln(x)
        t = tokens.shape[1]
        y = self.tok(tokens)
        mask = torch.triu(torch.full((t, t), -1e4), 1)
        for layer in self.dec:
            y, _ = layer(y, mem=mem, mask=mask)
        return self.lnd(y) @ self.tok.weight.T


class BertMini(nn.Module):
    """A BERT-style encoder with token types and an attention mask input (post-norm, GELU, erf)."""

    def __init__(self, vocab=4000, dim=256, heads=4, depth=4):
        super().__init__()
        self.word, self.pos, self.types = nn.Embedding(vocab, dim), nn.Embedding(128, dim), nn.Embedding(2, dim)
        self.ln = nn.LayerNorm(dim)
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(dim, heads, 4 * dim, 0.0, "gelu", batch_first=True)
                                    for _ in range(depth))
        self.pool = nn.Linear(dim, dim)

    def forward(self, ids, types, mask):
        t = ids.shape[1]
        x = self.ln(self.word(ids) + self.pos(torch.arange(t).unsqueeze(0)) + self.types(types))
        bias = (1.0 - mask[:, None, None, :].float()) * -1e4
        bias = bias.expand(-1, self.layers[0].self_attn.num_heads, t, -1).reshape(-1, t, t)
        for layer in self.layers:
            x = layer(x, src_mask=bias)
        return x, torch.tanh(self.pool(x[:, 0]))


# ------------------------------------------------------------------ classic and mobile CNNs
class VGG(nn.Module):
    def __init__(self):
        super().__init__()
        layers, ci = [], 3
        for c in (16, "M", 32, "M", 64, 64, "M", 128, 128, "M", 128, 128, "M"):
            if c == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(ci, c, 3, 1, 1), nn.ReLU()]
                ci = c
        self.f = nn.Sequential(*layers)
        self.fc = nn.Sequential(nn.Linear(128 * 9, 256), nn.ReLU(), nn.Linear(256, 100))

    def forward(self, x):
        return self.fc(self.f(x).flatten(1))


class Basic(nn.Module):
    def __init__(self, ci, co, s):
        super().__init__()
        self.a, self.b = cba(ci, co, 3, s), cba(co, co, 3, act=None)
        self.sc = cba(ci, co, 1, s, act=None) if s != 1 or ci != co else nn.Identity()

    def forward(self, x):
        return F.relu(self.b(self.a(x)) + self.sc(x))


class Bottleneck(nn.Module):
    def __init__(self, ci, mid, co, s, g=1, se=False):
        super().__init__()
        self.f = nn.Sequential(cba(ci, mid, 1), cba(mid, mid, 3, s, g=g), cba(mid, co, 1, act=None))
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(mid, mid // 4, 1), nn.ReLU(),
                                nn.Conv2d(mid // 4, co, 1), nn.Sigmoid()) if se else None
        self.sc = cba(ci, co, 1, s, act=None) if s != 1 or ci != co else nn.Identity()

    def forward(self, x):
        y = self.f(x)
        if self.se is not None:
            y = y * self.se(self.f[1](self.f[0](x)))
        return F.relu(y + self.sc(x))


class ResNet(nn.Module):
    def __init__(self, bottleneck=False, w=24, grouped=False):
        super().__init__()
        self.stem = nn.Sequential(cba(3, w, 7, 2), nn.MaxPool2d(3, 2, 1))
        blocks, ci = [], w
        for i, c in enumerate((w, 2 * w, 4 * w, 8 * w)):
            for j in range(2):
                s = 2 if j == 0 and i > 0 else 1
                if bottleneck:
                    g = c // 8 if grouped else 1
                    blocks.append(Bottleneck(ci, c, 2 * c, s, g, se=grouped))
                    ci = 2 * c
                else:
                    blocks.append(Basic(ci, c, s))
                    ci = c
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(ci, 100)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1).flatten(1))


class InvertedResidual(nn.Module):
    def __init__(self, ci, co, s, e, k=3, act=nn.ReLU6, se=False, gate=nn.Sigmoid):
        super().__init__()
        mid = ci * e
        layers = [cba(ci, mid, 1, act=act)] if e != 1 else []
        layers.append(cba(mid, mid, k, s, g=mid, act=act))
        self.pre = nn.Sequential(*layers)
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(mid, max(8, mid // 4), 1), act(),
                                nn.Conv2d(max(8, mid // 4), mid, 1), gate()) if se else None
        self.post = cba(mid, co, 1, act=None)
        self.res = s == 1 and ci == co

    def forward(self, x):
        y = self.pre(x)
        if self.se is not None:
            y = y * self.se(y)
        y = self.post(y)
        return x + y if self.res else y


class MobileNet(nn.Module):
    """MobileNetV2 (ReLU6), MobileNetV3 (Hardswish, Hardsigmoid SE) or EfficientNet (SiLU, Sigmoid SE)."""

    def __init__(self, kind="v2"):
        super().__init__()
        act = {"v2": nn.ReLU6, "v3": nn.Hardswish, "eff": nn.SiLU}[kind]
        gate = nn.Hardsigmoid if kind == "v3" else nn.Sigmoid
        se = kind != "v2"
        cfg = [(16, 1, 1, 3), (24, 2, 4, 3), (24, 1, 4, 3), (40, 2, 4, 5), (40, 1, 4, 5), (80, 2, 4, 3),
               (80, 1, 4, 3), (112, 1, 4, 5), (160, 2, 4, 5)]
        blocks, ci = [cba(3, 16, 3, 2, act=act)], 16
        for co, s, e, k in cfg:
            blocks.append(InvertedResidual(ci, co, s, e, k if kind != "v2" else 3, act, se and k == 5, gate))
            ci = co
        blocks.append(cba(ci, 320, 1, act=act))
        self.f = nn.Sequential(*blocks)
        self.fc = nn.Linear(320, 100)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.f(x), 1).flatten(1))


class ShuffleUnit(nn.Module):
    def __init__(self, ci, co, s):
        super().__init__()
        self.s = s
        b = co // 2
        if s == 2:
            self.left = nn.Sequential(cba(ci, ci, 3, 2, g=ci, act=None), cba(ci, b, 1))
        self.right = nn.Sequential(cba(ci if s == 2 else b, b, 1), cba(b, b, 3, s, g=b, act=None), cba(b, b, 1))

    def forward(self, x):
        if self.s == 1:
            a, b = x.chunk(2, 1)
            y = torch.cat([a, self.right(b)], 1)
        else:
            y = torch.cat([self.left(x), self.right(x)], 1)
        n, c, h, w = y.shape
        return y.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)


class ShuffleNet(nn.Module):
    def __init__(self):
        super().__init__()
        layers, ci = [cba(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1)], 24
        for co, n in ((48, 3), (96, 4), (192, 3)):
            for i in range(n):
                layers.append(ShuffleUnit(ci, co, 2 if i == 0 else 1))
                ci = co
        self.f = nn.Sequential(*layers, cba(ci, 512, 1))
        self.fc = nn.Linear(512, 100)

    def forward(self, x):
        return self.fc(self.f(x).mean((2, 3)))


class Fire(nn.Module):
    def __init__(self, ci, s, e):
        super().__init__()
        self.s = nn.Sequential(nn.Conv2d(ci, s, 1), nn.ReLU())
        self.e1 = nn.Sequential(nn.Conv2d(s, e, 1), nn.ReLU())
        self.e3 = nn.Sequential(nn.Conv2d(s, e, 3, 1, 1), nn.ReLU())

    def forward(self, x):
        x = self.s(x)
        return torch.cat([self.e1(x), self.e3(x)], 1)


class SqueezeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(nn.Conv2d(3, 64, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
                               Fire(64, 16, 64), Fire(128, 16, 64), nn.MaxPool2d(3, 2, ceil_mode=True),
                               Fire(128, 32, 128), Fire(256, 32, 128), nn.MaxPool2d(3, 2, ceil_mode=True),
                               Fire(256, 48, 192), Fire(384, 64, 256), nn.Dropout(0.5),
                               nn.Conv2d(512, 100, 1), nn.ReLU(),
                               nn.AdaptiveAvgPool2d(1))

    def forward(self, x):
        return self.f(x).flatten(1)


class DenseNet(nn.Module):
    def __init__(self, growth=12):
        super().__init__()
        layers, c = [cba(3, 24, 3, 2), nn.MaxPool2d(2)], 24
        self.blocks = nn.ModuleList()
        self.trans = nn.ModuleList()
        self.stem = nn.Sequential(*layers)
        for i in range(3):
            block = nn.ModuleList()
            for _ in range(4):
                block.append(nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, 4 * growth, 1, bias=False),
                                           nn.BatchNorm2d(4 * growth), nn.ReLU(),
                                           nn.Conv2d(4 * growth, growth, 3, 1, 1, bias=False)))
                c += growth
            self.blocks.append(block)
            if i < 2:
                self.trans.append(nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1, bias=False),
                                                nn.AvgPool2d(2)))
                c //= 2
        self.fc = nn.Linear(c, 100)

    def forward(self, x):
        x = self.stem(x)
        for i, block in enumerate(self.blocks):
            for layer in block:
                x = torch.cat([x, layer(x)], 1)
            if i < 2:
                x = self.trans[i](x)
        return self.fc(F.adaptive_avg_pool2d(F.relu(x), 1).flatten(1))


class Inception(nn.Module):
    """GoogLeNet-style multi-branch modules (1x1, 3x3, double 3x3, 3x3 average pool + 1x1), concatenated."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(cba(3, 32, 3, 2), cba(32, 48, 3), nn.MaxPool2d(3, 2, 1))
        self.mods = nn.ModuleList()
        ci = 48
        for w in (16, 24, 32):
            self.mods.append(nn.ModuleList([cba(ci, w, 1), nn.Sequential(cba(ci, w, 1), cba(w, w, 3)),
                                            nn.Sequential(cba(ci, w // 2, 1), cba(w // 2, w, 3), cba(w, w, 3)),
                                            nn.Sequential(nn.AvgPool2d(3, 1, 1, count_include_pad=False),
                                                          cba(ci, w, 1))]))
            ci = 4 * w
        self.fc = nn.Linear(ci, 100)

    def forward(self, x):
        x = self.stem(x)
        for i, m in enumerate(self.mods):
            x = torch.cat([b(x) for b in m], 1)
            if i < 2:
                x = F.max_pool2d(x, 3, 2, 1)
        return self.fc(x.mean((2, 3)))


class ByteCNN(nn.Module):
    """A byte-level file-type classifier: Embedding (Gather) over 2048 bytes, strided Conv1d, global max."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(256, 32)
        self.f = nn.Sequential(nn.Conv1d(32, 64, 8, 4), nn.ReLU(), nn.Conv1d(64, 128, 8, 4), nn.ReLU(),
                               nn.Conv1d(128, 128, 4, 2), nn.ReLU())
        self.fc = nn.Linear(128, 40)

    def forward(self, x):
        y = self.f(self.emb(x).transpose(1, 2)).amax(2)
        return self.fc(y).softmax(-1)


class ESPCN(nn.Module):
    """Super-resolution: convs with Tanh, PixelShuffle (DepthToSpace) x3, clamp."""

    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(nn.Conv2d(1, 32, 5, 1, 2), nn.Tanh(), nn.Conv2d(32, 24, 3, 1, 1), nn.Tanh(),
                               nn.Conv2d(24, 9, 3, 1, 1), nn.PixelShuffle(3))

    def forward(self, x):
        return self.f(x).clamp(0, 1)


# ------------------------------------------------------------------ held out (added 2026-11-27; see registry.HELDOUT)
class ConvNeXtLite(nn.Module):
    """ConvNeXt blocks: depthwise 7x7, LayerNorm over channels (channels-last permute), inverted MLP with exact
    Gelu, layer scale, patchify stem and strided downsampling convs."""

    def __init__(self, dims=(32, 64, 128), depth=2, classes=100):
        super().__init__()
        self.stem = nn.Conv2d(3, dims[0], 4, 4)
        self.stages = nn.ModuleList()
        for i, d in enumerate(dims):
            blocks = [nn.Conv2d(dims[i - 1], d, 2, 2)] if i else []
            blocks += [ConvNeXtBlock(d) for _ in range(depth)]
            self.stages.append(nn.Sequential(*blocks))
        self.norm, self.head = nn.LayerNorm(dims[-1]), nn.Linear(dims[-1], classes)

    def forward(self, x):
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        return self.head(self.norm(x.mean((2, 3))))


class ConvNeXtBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.dw = nn.Conv2d(d, d, 7, padding=3, groups=d)
        self.norm = nn.LayerNorm(d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.gamma = nn.Parameter(torch.full((d,), 0.1))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.down(F.gelu(self.up(self.norm(y)))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


class TCN(nn.Module):
    """A temporal convolutional network (keyword spotting): causal dilated 1-D convs (left padding), residual
    1x1 projections, weight-normed style blocks, global average over time."""

    def __init__(self, ci=40, width=64, levels=5, classes=12):
        super().__init__()
        self.blocks = nn.ModuleList()
        c = ci
        for i in range(levels):
            self.blocks.append(nn.ModuleList([nn.Conv1d(c, width, 3, dilation=2 ** i),
                                              nn.Conv1d(width, width, 3, dilation=2 ** i),
                                              nn.Conv1d(c, width, 1) if c != width else nn.Identity()]))
            c = width
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        for i, (a, b, skip) in enumerate(self.blocks):
            pad = 2 * 2 ** i
            y = F.relu(a(F.pad(x, (pad, 0))))
            y = F.relu(b(F.pad(y, (pad, 0))))
            x = F.relu(y + skip(x))
        return self.head(x.mean(-1)).log_softmax(-1)


class LlamaBlockLM(nn.Module):
    """A Llama-style decoder over a prompt: RMSNorm, rotary position embeddings (sin/cos tables, rotate-half by
    Slice/Neg/Concat), grouped-query attention (2 KV heads for 4 query heads, repeated), causal mask, SwiGLU."""

    def __init__(self, vocab=1024, dim=192, heads=4, kv_heads=2, depth=3, seq=48):
        super().__init__()
        self.h, self.kv, self.d = heads, kv_heads, dim // heads
        self.emb = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList()
        for _ in range(depth):
            self.layers.append(nn.ModuleDict({
                "n1": RMSNorm(dim), "q": nn.Linear(dim, dim, bias=False),
                "k": nn.Linear(dim, kv_heads * self.d, bias=False), "v": nn.Linear(dim, kv_heads * self.d, bias=False),
                "o": nn.Linear(dim, dim, bias=False), "n2": RMSNorm(dim), "gate": nn.Linear(dim, 2 * dim, bias=False),
                "up": nn.Linear(dim, 2 * dim, bias=False), "down": nn.Linear(2 * dim, dim, bias=False)}))
        self.norm, self.head = RMSNorm(dim), nn.Linear(dim, vocab, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, self.d, 2).float() / self.d))
        angles = torch.arange(seq).float()[:, None] * inv[None, :]
        self.register_buffer("cos", torch.cat([angles.cos(), angles.cos()], -1))
        self.register_buffer("sin", torch.cat([angles.sin(), angles.sin()], -1))
        self.register_buffer("mask", torch.full((seq, seq), float("-inf")).triu(1))

    def rope(self, x):
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * self.cos + rotated * self.sin

    def forward(self, ids):
        n, t = ids.shape
        x = self.emb(ids)
        for layer in self.layers:
            y = layer["n1"](x)
            q = self.rope(layer["q"](y).view(n, t, self.h, self.d).transpose(1, 2))
            k = self.rope(layer["k"](y).view(n, t, self.kv, self.d).transpose(1, 2))
            v = layer["v"](y).view(n, t, self.kv, self.d).transpose(1, 2)
            k, v = k.repeat_interleave(self.h // self.kv, 1), v.repeat_interleave(self.h // self.kv, 1)
            a = (q @ k.transpose(-1, -2)) / self.d ** 0.5 + self.mask
            x = x + layer["o"]((a.softmax(-1) @ v).transpose(1, 2).reshape(n, t, -1))
            y = layer["n2"](x)
            x = x + layer["down"](F.silu(layer["gate"](y)) * layer["up"](y))
        return self.head(self.norm(x))


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class PointNet(nn.Module):
    """PointNet classification on a point cloud: shared per-point MLPs as 1x1 Conv1d, an input transform
    predicted by a T-Net (batched MatMul by a computed 3x3), global max pooling, MLP head."""

    def __init__(self, points=1024, classes=16):
        super().__init__()
        self.tnet = nn.Sequential(nn.Conv1d(3, 64, 1), nn.ReLU(), nn.Conv1d(64, 256, 1), nn.ReLU())
        self.tfc = nn.Sequential(nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 9))
        self.mlp = nn.Sequential(nn.Conv1d(3, 64, 1), nn.BatchNorm1d(64), nn.ReLU(), nn.Conv1d(64, 128, 1),
                                 nn.BatchNorm1d(128), nn.ReLU(), nn.Conv1d(128, 512, 1))
        self.head = nn.Sequential(nn.Linear(512, 128), nn.ReLU(), nn.Linear(128, classes))

    def forward(self, pts):
        t = self.tfc(self.tnet(pts).amax(-1)).view(-1, 3, 3) + torch.eye(3)
        x = torch.bmm(t, pts)
        return self.head(self.mlp(x).amax(-1)).softmax(-1)


class Hourglass(nn.Module):
    """A stacked-hourglass pose network (one stack): residual blocks, MaxPool down, nearest Upsample up, skip
    adds at every scale, heatmap head."""

    def __init__(self, width=48, depth=3, joints=17):
        super().__init__()
        self.stem = nn.Sequential(cba(3, width, 7, 2), nn.MaxPool2d(2))
        self.down = nn.ModuleList(HgResidual(width) for _ in range(depth))
        self.skip = nn.ModuleList(HgResidual(width) for _ in range(depth))
        self.up = nn.ModuleList(HgResidual(width) for _ in range(depth))
        self.mid = HgResidual(width)
        self.head = nn.Conv2d(width, joints, 1)

    def forward(self, x):
        x = self.stem(x)
        skips = []
        for down, skip in zip(self.down, self.skip):
            skips.append(skip(x))
            x = down(F.max_pool2d(x, 2))
        x = self.mid(x)
        for up, s in zip(self.up, reversed(skips)):
            x = up(F.interpolate(x, scale_factor=2.0, mode="nearest")) + s
        return self.head(x)


class HgResidual(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.body = nn.Sequential(cba(c, c // 2, 1), cba(c // 2, c // 2, 3), cba(c // 2, c, 1, act=None))

    def forward(self, x):
        return F.relu(x + self.body(x))


class BiLSTMTagger(nn.Module):
    """A sequence tagger: word embeddings, two stacked bidirectional LSTMs, a per-token linear layer and
    log-softmax (named-entity recognition's classic shape)."""

    def __init__(self, vocab=5000, dim=96, hidden=128, tags=9):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.out = nn.Linear(2 * hidden, tags)

    def forward(self, ids):
        return self.out(self.lstm(self.emb(ids))[0]).log_softmax(-1)


class SiameseXCorr(nn.Module):
    """A SiamFC-style tracker: one backbone on the exemplar and the search image, then their depthwise
    cross-correlation, a convolution whose weights are computed tensors (per-channel groups), and a score head."""

    def __init__(self, width=64):
        super().__init__()
        self.backbone = nn.Sequential(cba(3, 32, 3, 2), cba(32, width, 3, 2), cba(width, width, 3, 1),
                                      cba(width, width, 3, 1))
        self.width = width
        self.head = nn.Sequential(cba(width, width, 1), nn.Conv2d(width, 1, 1))

    def forward(self, exemplar, search):
        z, x = self.backbone(exemplar), self.backbone(search)
        corr = F.conv2d(x, z.reshape(self.width, 1, z.shape[2], z.shape[3]), groups=self.width)
        return self.head(corr)


class MobileViTLite(nn.Module):
    """MobileViT-style: inverted residual convs, then a block that unfolds the feature map into 2x2 patches
    (reshape/transpose), runs transformer layers across patches, folds back and fuses with a conv."""

    def __init__(self, classes=100):
        super().__init__()
        self.convs = nn.Sequential(cba(3, 16, 3, 2, act=nn.SiLU), InvertedResidual(16, 24, 2, 4),
                                   InvertedResidual(24, 48, 2, 4), InvertedResidual(48, 64, 2, 4))
        self.local = nn.Sequential(cba(64, 64, 3, act=nn.SiLU), nn.Conv2d(64, 96, 1, bias=False))
        layer = nn.TransformerEncoderLayer(96, 4, 192, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.transformer = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.proj = cba(96, 64, 1, act=nn.SiLU)
        self.fuse = cba(128, 64, 3, act=nn.SiLU)
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        x = self.convs(x)
        n, _, h, w = x.shape
        y = self.local(x)
        c = y.shape[1]
        # unfold: (n, c, h, w) -> (n * 4, h/2 * w/2, c): each of the 4 pixel positions of a 2x2 patch a sequence
        p = y.reshape(n, c, h // 2, 2, w // 2, 2).permute(0, 3, 5, 2, 4, 1).reshape(n * 4, (h // 2) * (w // 2), c)
        p = self.transformer(p)
        y = p.reshape(n, 2, 2, h // 2, w // 2, c).permute(0, 5, 3, 1, 4, 2).reshape(n, c, h, w)
        x = self.fuse(torch.cat([x, self.proj(y)], 1))
        return self.head(x.mean((2, 3)))
