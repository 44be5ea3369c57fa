"""ResNet-18 (torchvision.models.resnet18) and RegNetY-400MF (torchvision.models.regnet_y_400mf)."""
from __future__ import annotations

import torch
from torch import nn

from .mobilenetv3 import conv_bn_act


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.a = conv_bn_act(cin, cout, 3, stride, act=nn.ReLU)
        self.b = conv_bn_act(cout, cout, 3, act=None)
        self.down = conv_bn_act(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x):
        return torch.relu(self.b(self.a(x)) + self.down(x))


class ResNet18(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        layers = [conv_bn_act(3, 64, 7, 2, act=nn.ReLU), nn.MaxPool2d(3, 2, 1)]
        cin = 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        return self.fc(nn.functional.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


class YBlock(nn.Module):
    """RegNet's ResBottleneckBlock: 1x1, grouped 3x3 (group width 8), SE (ReLU, sigmoid), 1x1."""

    def __init__(self, cin: int, cout: int, stride: int, group_width: int = 8, se_ratio: float = 0.25):
        super().__init__()
        self.a = conv_bn_act(cin, cout, 1, act=nn.ReLU)
        self.b = conv_bn_act(cout, cout, 3, stride, groups=cout // group_width, act=nn.ReLU)
        squeeze = int(round(se_ratio * cin))
        self.se1, self.se2 = nn.Conv2d(cout, squeeze, 1), nn.Conv2d(squeeze, cout, 1)
        self.c = conv_bn_act(cout, cout, 1, act=None)
        self.proj = conv_bn_act(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x):
        y = self.b(self.a(x))
        s = torch.sigmoid(self.se2(torch.relu(self.se1(nn.functional.adaptive_avg_pool2d(y, 1)))))
        return torch.relu(self.proj(x) + self.c(y * s))


class RegNetY400MF(nn.Module):
    # widths and depths of regnet_y_400mf
    STAGES = ((48, 1), (104, 3), (208, 6), (440, 6))

    def __init__(self, classes: int = 1000):
        super().__init__()
        layers = [conv_bn_act(3, 32, 3, 2, act=nn.ReLU)]
        cin = 32
        for width, depth in self.STAGES:
            for i in range(depth):
                layers.append(YBlock(cin, width, 2 if i == 0 else 1))
                cin = width
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(nn.functional.adaptive_avg_pool2d(self.features(x), 1).flatten(1))
