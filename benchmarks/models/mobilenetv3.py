"""MobileNetV3-small (torchvision.models.mobilenet_v3_small): inverted residuals, depthwise 3x3/5x5,
squeeze-excite with hardsigmoid, hardswish."""
from __future__ import annotations

import torch
from torch import nn


def divisible(v: float, d: int = 8) -> int:
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n


def conv_bn_act(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act=nn.Hardswish) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeeze: int, gate=nn.Hardsigmoid, act=nn.ReLU):
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.act, self.gate = act(), gate()

    def forward(self, x):
        s = torch.nn.functional.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.fc2(self.act(self.fc1(s))))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, k: int, exp: int, cout: int, se: bool, hs: bool, stride: int):
        super().__init__()
        act = nn.Hardswish if hs else nn.ReLU
        layers = []
        if exp != cin:
            layers.append(conv_bn_act(cin, exp, 1, act=act))
        layers.append(conv_bn_act(exp, exp, k, stride, groups=exp, act=act))
        if se:
            layers.append(SqueezeExcite(exp, divisible(exp // 4)))
        layers.append(conv_bn_act(exp, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.block(x)
        return x + y if self.residual else y


# (in, kernel, expanded, out, SE, hardswish, stride) of mobilenet_v3_small
SMALL = [(16, 3, 16, 16, True, False, 2), (16, 3, 72, 24, False, False, 2), (24, 3, 88, 24, False, False, 1),
         (24, 5, 96, 40, True, True, 2), (40, 5, 240, 40, True, True, 1), (40, 5, 240, 40, True, True, 1),
         (40, 5, 120, 48, True, True, 1), (48, 5, 144, 48, True, True, 1), (48, 5, 288, 96, True, True, 2),
         (96, 5, 576, 96, True, True, 1), (96, 5, 576, 96, True, True, 1)]
# mobilenet_v3_large, the SSDlite backbone
LARGE = [(16, 3, 16, 16, False, False, 1), (16, 3, 64, 24, False, False, 2), (24, 3, 72, 24, False, False, 1),
         (24, 5, 72, 40, True, False, 2), (40, 5, 120, 40, True, False, 1), (40, 5, 120, 40, True, False, 1),
         (40, 3, 240, 80, False, True, 2), (80, 3, 200, 80, False, True, 1), (80, 3, 184, 80, False, True, 1),
         (80, 3, 184, 80, False, True, 1), (80, 3, 480, 112, True, True, 1), (112, 3, 672, 112, True, True, 1),
         (112, 5, 672, 160, True, True, 2), (160, 5, 960, 160, True, True, 1), (160, 5, 960, 160, True, True, 1)]


def features(config) -> list[nn.Module]:
    return [conv_bn_act(3, 16, 3, 2)] + [InvertedResidual(*c) for c in config]


class MobileNetV3Small(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        self.features = nn.Sequential(*features(SMALL), conv_bn_act(96, 576, 1))
        self.classifier = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(1024, classes))

    def forward(self, x):
        x = torch.nn.functional.adaptive_avg_pool2d(self.features(x), 1).flatten(1)
        return self.classifier(x)
