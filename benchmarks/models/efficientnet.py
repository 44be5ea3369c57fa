"""EfficientNet-B0 (torchvision.models.efficientnet_b0): MBConv with depthwise convs, SE with SiLU and sigmoid."""
from __future__ import annotations

import torch
from torch import nn

from .mobilenetv3 import conv_bn_act, divisible


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeeze: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(channels, squeeze, 1), nn.Conv2d(squeeze, channels, 1)

    def forward(self, x):
        s = torch.nn.functional.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.fc2(torch.nn.functional.silu(self.fc1(s))))


class MBConv(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride: int, expand: int):
        super().__init__()
        exp = divisible(cin * expand)
        layers = []
        if exp != cin:
            layers.append(conv_bn_act(cin, exp, 1, act=nn.SiLU))
        layers += [conv_bn_act(exp, exp, k, stride, groups=exp, act=nn.SiLU), SqueezeExcite(exp, max(1, cin // 4)),
                   conv_bn_act(exp, cout, 1, act=None)]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.block(x)
        return x + y if self.residual else y


# (expand, kernel, stride, in, out, repeats) of B0
B0 = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
      (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]


class EfficientNetB0(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        layers = [conv_bn_act(3, 32, 3, 2, act=nn.SiLU)]
        for expand, k, stride, cin, cout, n in B0:
            for i in range(n):
                layers.append(MBConv(cin if i == 0 else cout, cout, k, stride if i == 0 else 1, expand))
        layers.append(conv_bn_act(320, 1280, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(self, x):
        return self.classifier(torch.nn.functional.adaptive_avg_pool2d(self.features(x), 1).flatten(1))
