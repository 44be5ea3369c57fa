"""Seeded torch modules exported to ONNX and saved again by onnxruntime's optimizer (ORT_ENABLE_EXTENDED, CPU):
the com.microsoft float ops onnxruntime writes (FusedConv, FusedMatMul, FusedGemm, SkipLayerNormalization,
BiasGelu, FastGelu, ...), as a user's pre-optimized model has them."""
from __future__ import annotations

import io
import os
import tempfile

import numpy as np
import onnx


def _modules():
    import torch
    from torch import nn

    class Encoder(nn.Module):
        """BERT-like block: attention by MatMul/Softmax, LayerNorm, Gelu (erf and tanh), residuals."""

        def __init__(self, d=48, heads=4, ff=96):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.ff1, self.ff2 = nn.Linear(d, ff), nn.Linear(ff, d)
            self.ff3 = nn.Linear(d, d)
            self.h = heads

        def forward(self, x):
            b, s, d = x.shape
            h = self.h

            def split(t):
                return t.reshape(b, s, h, d // h).transpose(1, 2)
            q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
            a = torch.softmax(q @ k.transpose(-1, -2) / (d // h) ** 0.5, dim=-1) @ v
            x = self.ln1(x + self.o(a.transpose(1, 2).reshape(b, s, d)))
            y = self.ln2(x + self.ff2(nn.functional.gelu(self.ff1(x))))
            return y + nn.functional.gelu(self.ff3(y), approximate="tanh")

    class ConvNet(nn.Module):
        """Conv+BN+ReLU/SiLU/HardSigmoid/LeakyRelu/Clip, and a Linear head with ReLU."""

        def __init__(self):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.c2, self.b2 = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2), nn.BatchNorm2d(8)
            self.c3 = nn.Conv2d(8, 12, 1)
            self.c4 = nn.Conv2d(12, 12, 3, padding=1)
            self.c5 = nn.Conv2d(12, 8, 3, padding=2, dilation=2)
            self.c6 = nn.Conv2d(8, 8, 1)
            self.c7 = nn.Conv2d(8, 8, 3, padding=1)
            self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 5)
            for bn in (self.b1, self.b2):
                bn.running_mean.uniform_(-0.5, 0.5)
                bn.running_var.uniform_(0.5, 1.5)

        def forward(self, x):
            x = torch.relu(self.b1(self.c1(x)))
            x = nn.functional.silu(self.b2(self.c2(x)))
            x = nn.functional.hardsigmoid(self.c3(x))
            x = nn.functional.leaky_relu(self.c4(x), 0.1)
            x = torch.clamp(self.c5(x), -1.0, 2.0)
            x = torch.sigmoid(self.c6(x))
            x = torch.tanh(self.c7(x))
            x = x.mean(dim=(2, 3))
            return self.fc2(torch.relu(self.fc1(x)))

    class Decoder(nn.Module):
        """GPT-like block: causal attention, LayerNorm first, tanh Gelu MLP, a transposed-weight matmul."""

        def __init__(self, d=32, heads=2, vocab=50):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.ln1, self.ln2, self.lnf = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.h = heads

        def forward(self, ids):
            x = self.emb(ids)
            b, s, d = x.shape
            h = self.h
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (t.reshape(b, s, h, d // h).transpose(1, 2) for t in (q, k, v))
            w = (q @ k.transpose(-1, -2)) * (1.0 / (d // h) ** 0.5)
            mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
            w = w.masked_fill(mask, -1e4)
            a = torch.softmax(w, dim=-1) @ v
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
            x = x + self.out(nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))
            return self.lnf(x) @ self.emb.weight.t()

    return {"encoder": (Encoder, "f", (2, 7, 48)), "convnet": (ConvNet, "f", (1, 3, 16, 20)),
            "decoder": (Decoder, "i", (1, 9))}


def feeds(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    """A seeded input for model ``name``."""
    _, kind, shape = _modules()[name]
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 50, shape).astype(np.int64) if kind == "i" else rng.standard_normal(shape).astype(np.float32)
    return {"x": x}


def exported(name: str, opset: int = 17) -> bytes:
    """The seeded module ``name`` exported by torch (TorchScript exporter) at ``opset``."""
    import torch

    cls, _, _ = _modules()[name]
    torch.manual_seed(0)
    module = cls().eval()
    x = torch.from_numpy(feeds(name)["x"])
    buf = io.BytesIO()
    torch.onnx.export(module, (x,), buf, input_names=["x"], output_names=["y"], opset_version=opset,
                      dynamo=False)
    return buf.getvalue()


def ort_optimized(model: bytes, level: str = "extended") -> onnx.ModelProto:
    """``model`` as onnxruntime saves it after optimizing at ``level`` on the CPU execution provider."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = {"basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                                   "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED}[level]
    with tempfile.TemporaryDirectory() as d:
        so.optimized_model_filepath = os.path.join(d, "opt.onnx")
        ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        return onnx.load(so.optimized_model_filepath)


def transformers_optimized(model: bytes, model_type: str, num_heads: int, hidden_size: int) -> onnx.ModelProto:
    """``model`` as onnxruntime.transformers' optimizer rewrites it (its fusions only: opt_level 0)."""
    from onnxruntime.transformers import optimizer

    return optimizer.optimize_model(onnx.load_from_string(model), model_type=model_type, num_heads=num_heads,
                                    hidden_size=hidden_size, opt_level=0).model
