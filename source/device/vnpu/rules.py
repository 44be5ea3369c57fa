"""What the vnpu can run: its op set and the attribute limits of the chip.

One small function per op, each a ladder of early ``return reason`` guards
(an empty string means the vnpu accepts the node).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnhal.device.device import Candidate

MAX_KERNEL = 7
MAX_STRIDE = 4
MAX_CHANNELS = 4096
MAX_REDUCTION = 16384
F32 = np.dtype(np.float32)


def _activations_f32(c: Candidate) -> str:
    for i, info in enumerate(c.inputs):
        if info is not None and info.value is None and info.dtype != F32:
            return f"input {i} is {info.dtype}; the vnpu quantizes float32 activations only"
    for i, info in enumerate(c.outputs):
        if info is not None and info.dtype != F32:
            return f"output {i} is {info.dtype}; the vnpu produces float32 (quantized) tensors only"
    return ""


def _window(c: Candidate, rank: int = 4) -> str:
    x = c.inputs[0]
    if x.shape is None or len(x.shape) != rank:
        return f"input rank {None if x.shape is None else len(x.shape)}; the vnpu needs rank {rank} (NCHW)"
    a = c.node.attrs
    kernel = a.get("kernel_shape") or (list(c.inputs[1].shape[2:]) if len(c.inputs) > 1 and c.inputs[1] else [])
    if any(k > MAX_KERNEL for k in kernel):
        return f"kernel {kernel} exceeds the vnpu's {MAX_KERNEL}x{MAX_KERNEL}"
    if any(s > MAX_STRIDE for s in (a.get("strides") or [])):
        return f"stride {a.get('strides')} exceeds the vnpu's {MAX_STRIDE}"
    if any(d != 1 for d in (a.get("dilations") or [])):
        return f"dilations {a.get('dilations')}: the vnpu has no dilated windows"
    if a.get("ceil_mode", 0):
        return "ceil_mode=1 is not supported by the vnpu"
    return ""


def conv(c: Candidate) -> str:
    if why := _window(c):
        return why
    x, w = c.inputs[0], c.inputs[1]
    if w is None or w.value is None:
        return "the weight is not a constant"
    if len(c.inputs) > 2 and c.inputs[2] is not None and c.inputs[2].value is None:
        return "the bias is not a constant"
    if x.shape[1] is None or x.shape[1] > MAX_CHANNELS or w.shape[0] > MAX_CHANNELS:
        return f"channels {x.shape[1]} -> {w.shape[0]} exceed the vnpu's {MAX_CHANNELS}"
    return ""


def gemm(c: Candidate) -> str:
    a = c.node.attrs
    if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
        return "only Gemm with transA=0, alpha=1, beta=1"
    b = c.inputs[1]
    if b is None or b.value is None or b.value.ndim != 2:
        return "the weight is not a constant matrix"
    bias = c.inputs[2] if len(c.inputs) > 2 else None
    if bias is not None and bias.value is None:
        return "the bias is not a constant"
    k, m = (b.value.shape[1], b.value.shape[0]) if a.get("transB", 0) else b.value.shape
    if bias is not None and (bias.value.size not in (1, m) or (bias.value.ndim == 2 and bias.value.shape[0] != 1)):
        return f"a bias of shape {list(bias.value.shape)}: the vnpu adds one bias per output channel ({m})"
    if m > MAX_CHANNELS or k > MAX_REDUCTION:
        return f"{k}x{m} weight exceeds the vnpu's limits ({MAX_REDUCTION} x {MAX_CHANNELS})"
    return ""


def matmul(c: Candidate) -> str:
    b = c.inputs[1]
    if b is None or b.value is None or b.value.ndim != 2:
        return "the second operand is not a constant matrix"
    if c.inputs[0].shape is None or len(c.inputs[0].shape) < 2:
        return "the first operand must have rank >= 2"
    if b.value.shape[1] > MAX_CHANNELS or b.value.shape[0] > MAX_REDUCTION:
        return f"{b.value.shape} weight exceeds the vnpu's limits"
    return ""


def clip(c: Candidate) -> str:
    for i in (1, 2):
        if len(c.inputs) > i and c.inputs[i] is not None and c.inputs[i].value is None:
            return "clip bounds must be constants"
    return ""


def max_pool(c: Candidate) -> str:
    if len(c.outputs) > 1 and c.node.outputs[1]:
        return "the Indices output is not supported"
    if c.node.attrs.get("storage_order", 0):
        return "storage_order=1 is not supported"
    return _window(c)


def average_pool(c: Candidate) -> str:
    if why := _window(c):
        return why
    if any(c.node.attrs.get("pads") or []) and not c.node.attrs.get("count_include_pad", 0):
        return "padded average pooling must count the padding (count_include_pad=1) on the vnpu"
    if c.node.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return f"auto_pad={c.node.attrs['auto_pad']} is not supported by the vnpu's average pooling"
    return ""


def global_average_pool(c: Candidate) -> str:
    x = c.inputs[0]
    return "" if x.shape is not None and len(x.shape) == 4 else "the vnpu needs rank 4 (NCHW)"


def elementwise(c: Candidate) -> str:
    return ""


def reshape(c: Candidate) -> str:
    return "" if c.inputs[1] is not None and c.inputs[1].value is not None else "the target shape is not constant"


RULES: dict[str, Callable[[Candidate], str]] = {
    "Conv": conv, "Gemm": gemm, "MatMul": matmul, "Relu": elementwise, "Clip": clip, "MaxPool": max_pool,
    "AveragePool": average_pool, "GlobalAveragePool": global_average_pool, "Add": elementwise, "Mul": elementwise,
    "Concat": elementwise, "Reshape": reshape, "Transpose": elementwise,
}


def why_not(c: Candidate) -> str:
    """Empty when the vnpu can run the node, else the reason it cannot."""
    rule = RULES.get(c.node.op_type)
    if rule is None:
        return f"the vnpu has no {c.node.op_type}"
    return _activations_f32(c) or rule(c)
