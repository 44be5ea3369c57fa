"""Shared inference aids of the nn operators: pooling geometry and (N, C, ...) checks."""
from __future__ import annotations

import numpy as np

from nnhal.errors import ModelError, UnsupportedTypeError, where
from nnhal.graph.node import Node
from nnhal.operator.base import Info, Prototype
from nnhal.operator.spatial import output_sizes, resolve_pads

POOL_ATTRIBUTES = {"auto_pad": "NOTSET", "pads": None, "strides": None}


def pool_geometry(node: Node, in_sizes: list[int], kernel: list[int] | None = None) -> dict:
    """Kernel, strides, dilations, explicit pads and ceil mode of a pooling node."""
    n = len(in_sizes)
    kernel = list(kernel or node.attrs.get("kernel_shape") or in_sizes)
    if len(kernel) != n:
        raise ModelError(f"{where(node)}: kernel_shape {kernel} does not match {n} spatial dims")
    strides = list(node.attrs.get("strides") or [1] * n)
    dilations = list(node.attrs.get("dilations") or [1] * n)
    ceil_mode = bool(node.attrs.get("ceil_mode", 0))
    pads = resolve_pads(node, in_sizes, kernel, strides, dilations, ceil_mode)
    out = output_sizes(node, in_sizes, kernel, strides, dilations, pads, ceil_mode)
    return {"kernel": kernel, "strides": strides, "dilations": dilations, "pads": pads,
            "ceil_mode": ceil_mode, "out": out}


def check_positive(node: Node, *names: str) -> None:
    """ModelError unless every listed int-list attribute is all >= 1."""
    for name in names:
        values = node.attrs.get(name)
        if values is not None and any(int(v) < 1 for v in values):
            raise ModelError(f"{where(node)}: {name} must be >= 1, got {list(values)}")


class PoolPrototype(Prototype):
    """A windowed pooling op: X (N, C, *S) -> Y (N, C, *out)."""

    def check(self, node: Node) -> None:
        check_positive(node, "kernel_shape", "strides", "dilations")

    def spatial_out(self, node: Node, x: Info) -> tuple | None:
        if x.shape is None:
            return None
        if len(x.shape) < 3:
            raise self.fail(node, f"input rank {len(x.shape)} is below 3 (N, C, spatial...)")
        sizes = list(x.shape[2:])
        if any(s is None for s in sizes):
            return (x.shape[0], x.shape[1]) + (None,) * len(sizes)
        return (x.shape[0], x.shape[1], *pool_geometry(node, sizes)["out"])

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        return [Info(x.dtype, self.spatial_out(node, x))]


class GlobalPoolPrototype(Prototype):
    """A global pooling op: X (N, C, *S) -> Y (N, C, 1, ...)."""

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        x = ins[0]
        if x.shape is None:
            return [Info(x.dtype, None)]
        if len(x.shape) < 2:
            raise self.fail(node, f"input rank {len(x.shape)} is below 2")
        return [Info(x.dtype, (x.shape[0], x.shape[1]) + (1,) * (len(x.shape) - 2))]


def require_float(proto: Prototype, node: Node, info: Info | None, what: str = "input") -> None:
    """ShapeError unless ``info`` is a floating point tensor (or unknown)."""
    if info is not None and info.dtype is not None and info.dtype.kind != "f":
        raise proto.fail(node, f"{what} has dtype {info.dtype}; a floating point type is required")


STASH_TYPES = {1: np.dtype(np.float32), 10: np.dtype(np.float16), 11: np.dtype(np.float64)}


def stash_dtype(proto: Prototype, node: Node) -> np.dtype:
    """The computation dtype named by a stash_type attribute (a TensorProto element type)."""
    code = int(node.attrs.get("stash_type", 1))
    if code not in STASH_TYPES:
        raise UnsupportedTypeError(f"{where(node)}: stash_type {code} is not float, float16 or double")
    return STASH_TYPES[code]


def same_float(proto: Prototype, node: Node, ins: list[Info | None]) -> list[Info]:
    """One output like input 0, which must be floating point."""
    require_float(proto, node, ins[0])
    return [Info(ins[0].dtype, ins[0].shape)]


def _values(info_or_array) -> np.ndarray | None:
    """A constant 1-D value, or None when absent or empty."""
    if info_or_array is None:
        return None
    value = info_or_array.value if isinstance(info_or_array, Info) else info_or_array
    if value is None:
        return None
    value = np.asarray(value).reshape(-1)
    return value if value.size else None


def resize_axes(node: Node, rank: int) -> list[int]:
    """The axes a Resize node's roi/scales/sizes refer to (all axes by default)."""
    axes = node.attrs.get("axes")
    if not axes:
        return list(range(rank))
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise ModelError(f"{where(node)}: axis {a} is out of range for rank {rank}")
        out.append(a + rank if a < 0 else a)
    return out


def resize_targets(node: Node, in_shape: tuple, scales, sizes, roi=None) -> dict:
    """Output sizes, per-axis scales and per-axis roi (start, end) of a Resize or Upsample.

    ``scales``, ``sizes`` and ``roi`` are constant arrays (or Info with values);
    an empty or absent one counts as not given. Unknown input dims give None sizes.
    """
    rank = len(in_shape)
    axes = resize_axes(node, rank)
    scales, sizes, roi = _values(scales), _values(sizes), _values(roi)
    full_scales = [1.0] * rank
    out = list(in_shape)
    if sizes is not None:
        if len(sizes) != len(axes):
            raise ModelError(f"{where(node)}: sizes has {len(sizes)} values for {len(axes)} axes")
        policy = node.attrs.get("keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            for s, a in zip(sizes, axes):
                out[a] = int(s)
                full_scales[a] = None if in_shape[a] is None else int(s) / in_shape[a]
        elif policy in ("not_larger", "not_smaller"):
            if any(in_shape[a] is None for a in axes):
                return {"out": [None if a in axes else d for a, d in enumerate(in_shape)], "scales": None,
                        "roi": None, "axes": axes}
            ratios = [int(s) / in_shape[a] for s, a in zip(sizes, axes)]
            scale = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                full_scales[a] = scale
                out[a] = int(scale * in_shape[a] + 0.5)
        else:
            raise ModelError(f"{where(node)}: keep_aspect_ratio_policy '{policy}' is not stretch, "
                             f"not_larger or not_smaller")
    elif scales is not None:
        if len(scales) != len(axes):
            raise ModelError(f"{where(node)}: scales has {len(scales)} values for {len(axes)} axes")
        for s, a in zip(scales, axes):
            s = float(s)
            if s <= 0:
                raise ModelError(f"{where(node)}: scales must be positive, got {list(scales)}")
            full_scales[a] = s
            # NOTE: like onnxruntime and the onnx reference, roi does not enter the output size.
            out[a] = None if in_shape[a] is None else int(np.floor(in_shape[a] * np.float64(s)))
    else:
        raise ModelError(f"{where(node)}: one of scales or sizes must be given")
    full_roi = None
    if roi is not None:
        if len(roi) != 2 * len(axes):
            raise ModelError(f"{where(node)}: roi has {len(roi)} values for {len(axes)} axes")
        full_roi = [(0.0, 1.0)] * rank
        for i, a in enumerate(axes):
            full_roi[a] = (float(roi[i]), float(roi[i + len(axes)]))
    return {"out": out, "scales": full_scales, "roi": full_roi, "axes": axes}
