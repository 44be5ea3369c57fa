"""ConvNeXt-tiny (torchvision.models.convnext_tiny): 7x7 depthwise, LayerNorm over channels (permute to NHWC),
Linear-GELU-Linear, layer scale."""
from __future__ import annotations

import torch
from torch import nn


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor (torchvision's: permute, normalise, permute back)."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class CNBlock(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.scale = nn.Parameter(torch.full((dim, 1, 1), 1e-6 * 1e5))   # 0.1: keeps the random signal alive

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(nn.functional.gelu(self.fc1(self.norm(y)))).permute(0, 3, 1, 2)
        return x + self.scale * y


class ConvNeXtTiny(nn.Module):
    def __init__(self, classes: int = 1000, dims=(96, 192, 384, 768), depths=(3, 3, 9, 3)):
        super().__init__()
        layers: list[nn.Module] = [nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6))]
        for i, (dim, depth) in enumerate(zip(dims, depths)):
            layers += [CNBlock(dim) for _ in range(depth)]
            if i + 1 < len(dims):
                layers.append(nn.Sequential(LayerNorm2d(dim, eps=1e-6), nn.Conv2d(dim, dims[i + 1], 2, 2)))
        self.features = nn.Sequential(*layers)
        self.norm = LayerNorm2d(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], classes)

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.head(self.norm(x).flatten(1))
