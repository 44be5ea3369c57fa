"""Swin-T (torchvision.models.swin_t, v1): 4x4 patch embedding, stages of depth (2, 2, 6, 2) at dims 96..768
with (3, 6, 12, 24) heads, 7x7 windows, every second block shifted by 3 with torch.roll and masked, relative
position bias, patch merging, LayerNorm, Linear-GELU-Linear MLP. The window attention is written out as
torchvision's shifted_window_attention does it (pad, roll, window partition, mask built in forward from the
padded size), so the export carries the same Slice/Concat, Reshape/Transpose and mask subgraphs."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _relative_position_index(window: int) -> torch.Tensor:
    """For each (query, key) pair of a window's tokens, the row of the bias table holding their offset."""
    coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window - 1)
    return (rel[:, :, 0] * (2 * window - 1) + rel[:, :, 1]).flatten()


class ShiftedWindowAttention(nn.Module):
    def __init__(self, dim: int, window: int, shift: int, heads: int):
        super().__init__()
        self.window, self.shift, self.heads = window, shift, heads
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.table = nn.Parameter(torch.zeros((2 * window - 1) ** 2, heads))
        nn.init.trunc_normal_(self.table, std=0.02)
        self.register_buffer("index", _relative_position_index(window), persistent=False)

    def bias(self) -> torch.Tensor:
        n = self.window * self.window
        return self.table[self.index].view(n, n, -1).permute(2, 0, 1).contiguous().unsqueeze(0)

    def forward(self, x):
        b, h, w, c = x.shape
        ws, heads = self.window, self.heads
        pad_r, pad_b = (ws - w % ws) % ws, (ws - h % ws) % ws
        x = F.pad(x, (0, 0, 0, pad_r, 0, pad_b))
        _, ph, pw, _ = x.shape
        shift = self.shift if ws < ph and ws < pw else 0   # torchvision: no shift when one window covers it
        if shift:
            x = torch.roll(x, shifts=(-shift, -shift), dims=(1, 2))
        windows = (ph // ws) * (pw // ws)
        x = x.view(b, ph // ws, ws, pw // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b * windows, ws * ws, c)
        qkv = self.qkv(x).reshape(x.size(0), x.size(1), 3, heads, c // heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * (c // heads) ** -0.5).matmul(k.transpose(-2, -1)) + self.bias()
        if shift:
            mask = x.new_zeros((ph, pw))
            cuts = ((0, -ws), (-ws, -shift), (-shift, None))
            count = 0
            for hs in cuts:
                for wsl in cuts:
                    mask[hs[0]:hs[1], wsl[0]:wsl[1]] = count
                    count += 1
            mask = mask.view(ph // ws, ws, pw // ws, ws).permute(0, 2, 1, 3).reshape(windows, ws * ws)
            mask = mask.unsqueeze(1) - mask.unsqueeze(2)
            mask = mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)
            attn = attn.view(x.size(0) // windows, windows, heads, x.size(1), x.size(1))
            attn = (attn + mask.unsqueeze(1).unsqueeze(0)).view(-1, heads, x.size(1), x.size(1))
        x = F.softmax(attn, dim=-1).matmul(v).transpose(1, 2).reshape(x.size(0), x.size(1), c)
        x = self.proj(x).view(b, ph // ws, pw // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b, ph, pw, c)
        if shift:
            x = torch.roll(x, shifts=(shift, shift), dims=(1, 2))
        return x[:, :h, :w, :].contiguous()


class SwinBlock(nn.Module):
    def __init__(self, dim: int, heads: int, window: int, shift: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = ShiftedWindowAttention(dim, window, shift, heads)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class PatchMerging(nn.Module):
    """2x2 neighbours concatenated (torchvision's order), LayerNorm, Linear(4C, 2C) without bias."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x):
        h, w = x.shape[-3], x.shape[-2]
        x = F.pad(x, (0, 0, 0, w % 2, 0, h % 2))
        x = torch.cat([x[..., 0::2, 0::2, :], x[..., 1::2, 0::2, :], x[..., 0::2, 1::2, :], x[..., 1::2, 1::2, :]], -1)
        return self.reduction(self.norm(x))


class SwinT(nn.Module):
    def __init__(self, classes: int = 1000, dim: int = 96, depths=(2, 2, 6, 2), heads=(3, 6, 12, 24), window: int = 7):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.patch_norm = nn.LayerNorm(dim)
        layers: list[nn.Module] = []
        for i, (depth, h) in enumerate(zip(depths, heads)):
            d = dim * 2 ** i
            layers += [SwinBlock(d, h, window, 0 if k % 2 == 0 else window // 2) for k in range(depth)]
            if i + 1 < len(depths):
                layers.append(PatchMerging(d))
        self.features = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(dim * 2 ** (len(depths) - 1))
        self.head = nn.Linear(dim * 2 ** (len(depths) - 1), classes)

    def forward(self, x):
        x = self.features(self.patch_norm(self.patch(x).permute(0, 2, 3, 1)))
        x = F.adaptive_avg_pool2d(self.norm(x).permute(0, 3, 1, 2), 1)
        return self.head(x.flatten(1))
