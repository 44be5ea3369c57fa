"""InstanceNormalization and GroupNormalization on the cpu device: native/nn_norm.h, one row (an instance or a
group) at a time while it is in L2: its mean and variance in two passes, then the per-channel scale and bias in
the same write, then an activation the plan fused into the node (fusions.fuse_activations) while the channel is in
L1/L2; rows split over the native pool. The references (hostkernels/op_instance_normalization.py,
op_group_normalization.py) take five numpy passes and two temporaries.

torch exports GroupNorm as Reshape(N, G, -1) -> InstanceNormalization -> Reshape back -> Mul -> Add; the cpu
plan's fusion (device/cpu/groupnorm.py) turns that chain into one GroupNormalization-21 node run here.
"""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.device.cpu.kernels._conv_nhwc import act_record
from nnhal.device.cpu.kernels._io import contiguous_io
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.fused import activation_of
from nnhal.operator._nn import STASH_TYPES


def _f32_vector(info, size: int) -> bool:
    return info is not None and info.dtype == np.float32 and info.shape is not None \
        and all(isinstance(d, int) for d in info.shape) and int(np.prod(info.shape, dtype=np.int64)) == size


def _images(x) -> bool:
    """Whether the native kernel takes input ``x``: float32 (N, C, ...) of static, non-empty shape."""
    return native.available() and x is not None and x.dtype == np.float32 and x.static and len(x.shape) >= 3 \
        and 0 not in x.shape


def _runner(node, ins, channels: int, groups: int, params: tuple) -> RunFn:
    """The run function of a native group_norm over ``groups`` rows an image, with the activation fused into
    ``node``; ``params`` maps the run's (scale, bias) inputs to per-channel float32 vectors."""
    eps, act = float(node.attrs["epsilon"]), act_record(activation_of(node))
    shape = tuple(ins[0].shape)
    rows = shape[0] * groups
    size = int(np.prod(shape, dtype=np.int64))
    constant = [None if p is None else p(None) for p in params]

    def run(inputs, outputs):
        x = np.ascontiguousarray(inputs[0])
        out = outputs[0] if outputs[0] is not None else np.empty(shape, np.float32)
        scale, bias = (c if c is not None else f(inputs[k]) for k, c, f in zip((1, 2), constant, params))
        # NOTE: parts at run time, the run's threads (concat.py says why)
        parts = parallel.native_parts(size * 4, rows) if parallel.native_pool() else 1
        native.group_norm(x, out, scale, bias, channels, groups, eps, act, parts)
        return (out,)

    return run


def _vector(info, reshape=None):
    """A function of the run's value of an input giving its float32 contiguous vector (repeated per channel
    by ``reshape``); called with None, it gives the constant's vector or None when the input varies."""
    def get(value):
        if value is None:
            if info.value is None:
                return None
            value = info.value
        v = np.ascontiguousarray(np.asarray(value, np.float32).reshape(-1))
        return reshape(v) if reshape else v
    return get


class InstanceNormalizationNative(Kernel):
    """float32 (N, C, ...) of static shape, scale and bias of C."""

    op_type = "InstanceNormalization"
    name = "native"
    inplace = {0: 0}
    fuse_activation = True

    def score(self, node, ins, outs) -> int:
        x = ins[0]
        if not _images(x):
            return 0
        return 10 if all(_f32_vector(p, x.shape[1]) for p in ins[1:3]) and len(ins) == 3 else 0

    def prepare(self, node, ins, outs) -> RunFn:
        channels = int(ins[0].shape[1])
        return _runner(node, ins, channels, channels, (_vector(ins[1]), _vector(ins[2])))


class GroupNormalizationNative(Kernel):
    """float32 (N, C, ...) of static shape in float32 stash; scale and bias per channel (opset 21) or per group
    (opset 18, repeated per channel at prepare or run)."""

    op_type = "GroupNormalization"
    name = "native"
    inplace = {0: 0}
    fuse_activation = True

    def score(self, node, ins, outs) -> int:
        x = ins[0]
        if not _images(x) or STASH_TYPES.get(int(node.attrs.get("stash_type", 1))) != np.float32:
            return 0
        groups = int(node.attrs["num_groups"])
        if groups < 1 or x.shape[1] % groups:
            return 0
        size = groups if node.version < 21 else x.shape[1]
        return 10 if len(ins) == 3 and all(_f32_vector(p, size) for p in ins[1:3]) else 0

    def prepare(self, node, ins, outs) -> RunFn:
        channels, groups = int(ins[0].shape[1]), int(node.attrs["num_groups"])
        spread = None if node.version >= 21 else (lambda v: np.repeat(v, channels // groups))
        return _runner(node, ins, channels, groups, (_vector(ins[1], spread), _vector(ins[2], spread)))


class GroupNormalizationNHWC(GroupNormalizationNative):
    """A 4-D GroupNormalization inside a channels-last region (the layout pass keeps an FCOS head's Conv ->
    GroupNorm -> Relu tower and its prediction Convs NHWC instead of turning each GroupNorm's input to NCHW and
    running the tower's Convs and the narrow prediction Convs on NCHW im2col): per image, the per-channel sums
    of x (N, H*W, C) as one BLAS product with a vector of ones, the group means, then the same for the squared
    deviations from them (two passes: no cancellation where the mean dwarfs the spread), and the normalization,
    scale, bias and fused activation as one native channel_affine pass (the BatchNormalization kernel's)."""

    name = "nhwc-native"
    layout = "NHWC"

    def score(self, node, ins, outs) -> int:
        x = ins[0]
        return super().score(node, ins, outs) if x is not None and x.shape is not None and len(x.shape) == 4 else 0

    def prepare(self, node, ins, outs) -> RunFn:
        n, channels, h, w = (int(d) for d in ins[0].shape)      # the logical NCHW shape; the data is NHWC
        groups = int(node.attrs["num_groups"])
        per, pixels = channels // groups, h * w
        spread = None if node.version >= 21 else (lambda v: np.repeat(v, per))
        params = (_vector(ins[1], spread), _vector(ins[2], spread))
        constant = [p(None) for p in params]
        eps, act = float(node.attrs["epsilon"]), act_record(activation_of(node))
        shape = (n, h, w, channels)
        ones = np.ones(pixels, np.float32)
        count = float(pixels * per)
        size = n * pixels * channels
        parts = parallel.native_parts(size, n * pixels) if parallel.native_pool() else 1

        def group_means(sums: np.ndarray) -> np.ndarray:
            """Per-channel sums over the pixels -> each channel's group mean (float64)."""
            return np.repeat(sums.astype(np.float64).reshape(groups, per).sum(1) / count, per)

        def run(inputs, outputs):
            x, y = contiguous_io(inputs, outputs, shape, np.float32)
            scale, bias = (c if c is not None else f(inputs[k]) for k, c, f in zip((1, 2), constant, params))
            x3, y3 = x.reshape(n, pixels, channels), y.reshape(n, pixels, channels)
            dev = np.empty((pixels, channels), np.float32)
            for i in range(n):
                mean = group_means(ones @ x3[i])
                np.subtract(x3[i], mean.astype(np.float32), out=dev)
                np.square(dev, out=dev)
                inv = 1.0 / np.sqrt(group_means(ones @ dev) + eps)
                a = (scale * inv).astype(np.float32)
                b = (bias - mean * scale * inv).astype(np.float32)
                native.channel_affine(x3[i], y3[i], a, b, act, parts)
            return (y,)

        return run


IMPLEMENTATIONS = (InstanceNormalizationNative, GroupNormalizationNative, GroupNormalizationNHWC)
