"""A small SiamRPN++-like tracker (seeded, built in torch): a shared backbone on a 127x127 template and a
255x255 search image, the template's features cropped to their centre, and heads whose convolution
weights are run-time tensors: depthwise cross-correlation (the template's channels as one kernel each,
groups = batch * channels, SiamRPN++'s xcorr_depthwise) for the classification and box heads, and SiamFC's
plain cross-correlation (the template's C channels as one kernel) for a score map. Used by
benchmarks/dynamic_conv.py and tests/device/cpu/test_dynamic_conv.py."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


def conv_bn_relu(cin: int, cout: int, k: int, stride: int = 1, pad: int = 0) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, pad, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


def xcorr_depthwise(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """Each of the B * C template channels correlated with its search channel (SiamRPN++)."""
    b, c = kernel.shape[:2]
    out = F.conv2d(x.reshape(1, b * c, x.shape[2], x.shape[3]),
                   kernel.reshape(b * c, 1, kernel.shape[2], kernel.shape[3]), groups=b * c)
    return out.reshape(b, c, out.shape[2], out.shape[3])


class DepthwiseXCorr(nn.Module):
    """SiamRPN++'s head: 3x3 adjustments of kernel and search, depthwise xcorr, 1x1 head."""

    def __init__(self, c: int, hidden: int, out: int):
        super().__init__()
        self.kernel = conv_bn_relu(c, hidden, 3)
        self.search = conv_bn_relu(c, hidden, 3)
        self.head = nn.Sequential(conv_bn_relu(hidden, hidden, 1), nn.Conv2d(hidden, out, 1))

    def forward(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.head(xcorr_depthwise(self.search(x), self.kernel(z)))


class SiamRPNLite(nn.Module):
    """(template (B, 3, 127, 127), search (B, 3, 255, 255)) -> (cls, loc, score)."""

    def __init__(self, width: int = 32, channels: int = 256, anchors: int = 5):
        super().__init__()
        w = width
        self.backbone = nn.Sequential(conv_bn_relu(3, w, 3, 2, 1), conv_bn_relu(w, 2 * w, 3, 2, 1),
                                      conv_bn_relu(2 * w, 4 * w, 3, 2, 1), conv_bn_relu(4 * w, channels, 3))
        self.cls = DepthwiseXCorr(channels, channels, 2 * anchors)
        self.loc = DepthwiseXCorr(channels, channels, 4 * anchors)

    def forward(self, template: torch.Tensor, search: torch.Tensor):
        z = self.backbone(template)
        z = z[:, :, 4:11, 4:11]                     # the centre 7x7 of the template's features
        x = self.backbone(search)
        score = F.conv2d(x, z[:1])                  # SiamFC's plain xcorr: C-channel kernel, one output
        return self.cls(z, x), self.loc(z, x), score


def build(seed: int = 0, width: int = 32, channels: int = 256, batch: int = 1, template: int = 127,
          search: int = 255) -> tuple[bytes, dict]:
    """The seeded tracker exported to ONNX (opset 17, static shapes) and its seeded feeds."""
    import io

    import numpy as np

    torch.manual_seed(seed)
    model = SiamRPNLite(width, channels).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    rng = np.random.default_rng(seed)
    feeds = {"template": rng.standard_normal((batch, 3, template, template)).astype(np.float32),
             "search": rng.standard_normal((batch, 3, search, search)).astype(np.float32)}
    buf = io.BytesIO()
    torch.onnx.export(model, (torch.from_numpy(feeds["template"]), torch.from_numpy(feeds["search"])), buf,
                      input_names=["template", "search"], output_names=["cls", "loc", "score"], opset_version=17,
                      dynamo=False)
    return buf.getvalue(), feeds
