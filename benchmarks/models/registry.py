"""The modern benchmark models: build in torch with seeded weights, export to ONNX (opset 17, dynamic batch),
cache the file under benchmarks/.cache/ (gitignored), load with feeds."""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

CACHE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".cache")
SEED = 0
VERSION = 1   # bump when a definition changes: it is part of the cached file's name


@dataclass(frozen=True)
class Spec:
    build: Callable[[], object]        # () -> torch.nn.Module
    input_shape: tuple[int, ...]       # without the batch dim
    outputs: tuple[str, ...]
    post: Callable | None = None       # (ModelProto) -> ModelProto appended after export


def _specs() -> dict[str, Spec]:
    from . import convnext, efficientnet, mobilenetv3, resnet, ssdlite, swin, transformer

    return {
        "mobilenetv3_small": Spec(mobilenetv3.MobileNetV3Small, (3, 224, 224), ("logits",)),
        "efficientnet_b0": Spec(efficientnet.EfficientNetB0, (3, 224, 224), ("logits",)),
        "convnext_tiny": Spec(convnext.ConvNeXtTiny, (3, 224, 224), ("logits",)),
        "ssdlite320": Spec(ssdlite.SSDLite, (3, 320, 320), ("boxes", "scores"),
                           lambda m: ssdlite.postprocess(m, len(ssdlite.default_boxes()))),
        "resnet18": Spec(resnet.ResNet18, (3, 224, 224), ("logits",)),
        "regnet_y_400mf": Spec(resnet.RegNetY400MF, (3, 224, 224), ("logits",)),
        "vit_b_16": Spec(transformer.ViTB16, (3, 224, 224), ("logits",)),
        "whisper_encoder": Spec(lambda: transformer.WhisperEncoder(dim=384, depth=4, heads=6, frames=1000),
                                (80, 1000), ("hidden",)),
        "swin_t": Spec(swin.SwinT, (3, 224, 224), ("logits",)),
    }


NAMES = ("mobilenetv3_small", "efficientnet_b0", "convnext_tiny", "ssdlite320", "resnet18", "regnet_y_400mf",
         "vit_b_16", "whisper_encoder", "swin_t")


def path(name: str) -> str:
    return os.path.join(CACHE, f"{name}-v{VERSION}-seed{SEED}.onnx")


def seeded(build: Callable[[], object], seed: int):
    """``build()`` in eval mode with seeded weights and BatchNorm statistics away from 0 and 1 (so the folded
    weights are not trivial)."""
    import torch

    torch.manual_seed(seed)
    module = build().eval()
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return module


def export(name: str) -> str:
    """The cached .onnx of ``name``, exported first when missing."""
    target = path(name)
    if os.path.exists(target):
        return target
    import onnx
    import torch

    spec = _specs()[name]
    module = seeded(spec.build, SEED)
    x = torch.randn(1, *spec.input_shape)
    os.makedirs(CACHE, exist_ok=True)
    tmp = target + ".tmp"
    torch.onnx.export(module, (x,), tmp, opset_version=17, input_names=["input"], output_names=list(spec.outputs),
                      dynamic_axes={"input": {0: "batch"}, **{o: {0: "batch"} for o in spec.outputs}},
                      dynamo=False)
    model = onnx.load(tmp)
    if spec.post is not None:
        model = spec.post(model)
    onnx.checker.check_model(model)
    onnx.save(model, target)
    os.remove(tmp)
    return target


def load(name: str, batch: int):
    """(ModelProto, feeds) at ``batch``, inputs drawn from a seeded generator."""
    import onnx

    model = onnx.load(export(name))
    shape = _specs()[name].input_shape
    x = np.random.default_rng(SEED).standard_normal((batch, *shape)).astype(np.float32)
    return model, {"input": x}
