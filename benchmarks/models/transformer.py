"""ViT-B/16 (torchvision.models.vit_b_16) and a Whisper-style audio encoder (transformers' WhisperEncoder:
two GELU conv1d stem, sinusoidal positions, pre-norm blocks)."""
from __future__ import annotations

import math

import torch
from torch import nn


class Attention(nn.Module):
    """Multi-head self-attention written out (Q/K/V projections, scaled softmax), as the exporters lower it."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x):
        b, t, d = x.shape
        split = lambda y: y.reshape(b, t, self.heads, self.head_dim).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.head_dim), dim=-1)
        return self.o((a @ v).transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int, eps: float):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim, eps=eps), nn.LayerNorm(dim, eps=eps)
        self.attn = Attention(dim, heads)
        self.fc1, self.fc2 = nn.Linear(dim, mlp), nn.Linear(mlp, dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


class ViTB16(nn.Module):
    def __init__(self, classes: int = 1000, dim: int = 768, depth: int = 12, heads: int = 12, image: int = 224):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 16, 16)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, (image // 16) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*(Block(dim, heads, 4 * dim, 1e-6) for _ in range(depth)))
        self.ln = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.ln(self.blocks(x))[:, 0])


class WhisperEncoder(nn.Module):
    """whisper-base's encoder sizes (6 layers, d=512, 8 heads) on 80 mel bins x 3000 frames."""

    def __init__(self, mels: int = 80, dim: int = 512, depth: int = 6, heads: int = 8, frames: int = 3000):
        super().__init__()
        self.conv1 = nn.Conv1d(mels, dim, 3, padding=1)
        self.conv2 = nn.Conv1d(dim, dim, 3, stride=2, padding=1)
        t = frames // 2
        inv = torch.exp(-math.log(10000) * torch.arange(dim // 2) / (dim // 2 - 1))
        ang = torch.arange(t)[:, None] * inv[None]
        self.register_buffer("pos", torch.cat([ang.sin(), ang.cos()], dim=1)[None])
        self.blocks = nn.Sequential(*(Block(dim, heads, 4 * dim, 1e-5) for _ in range(depth)))
        self.ln = nn.LayerNorm(dim)

    def forward(self, mel):
        x = nn.functional.gelu(self.conv2(nn.functional.gelu(self.conv1(mel))))
        return self.ln(self.blocks(x.transpose(1, 2) + self.pos))
