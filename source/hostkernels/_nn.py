"""Shared CPU helpers of the nn kernels: pooling windows over a padded input."""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator._nn import pool_geometry


def geometry_cache(node: Node) -> Callable[[tuple], dict]:
    """A memoized ``pool_geometry`` of the node keyed by spatial input shape."""
    cache: dict[tuple, dict] = {}

    def get(spatial: tuple) -> dict:
        g = cache.get(spatial)
        if g is None:
            g = cache[spatial] = pool_geometry(node, list(spatial))
        return g

    return get


def lowest(dtype: np.dtype):
    """The smallest value of a dtype (-inf for floats): the neutral fill of max."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return -np.inf
    if dtype.kind == "b":
        return False
    return np.iinfo(dtype).min


def padded(x: np.ndarray, g: dict, fill) -> np.ndarray:
    """x with begin pads and enough end padding for every (possibly ceil-mode) window."""
    n = len(g["kernel"])
    width = [(0, 0)] * (x.ndim - n)
    for i in range(n):
        span = (g["kernel"][i] - 1) * g["dilations"][i] + 1
        need = (g["out"][i] - 1) * g["strides"][i] + span
        begin = g["pads"][i]
        width.append((begin, max(0, need - begin - x.shape[x.ndim - n + i])))
    if not any(b or e for b, e in width):
        return x
    shape = tuple(s + b + e for s, (b, e) in zip(x.shape, width))
    buf = np.full(shape, fill, dtype=x.dtype)
    buf[tuple(slice(b, b + s) for s, (b, _) in zip(x.shape, width))] = x
    return buf


def window_taps(g: dict, lead: int = 2) -> Iterator[tuple[tuple[int, ...], tuple]]:
    """(kernel offset, index) of every kernel tap: index picks that tap of each window."""
    ranges = [range(k) for k in g["kernel"]]
    for taps in itertools.product(*ranges):
        index = (slice(None),) * lead + tuple(
            slice(t * d, t * d + (o - 1) * s + 1, s)
            for t, d, o, s in zip(taps, g["dilations"], g["out"], g["strides"]))
        yield taps, index


def tap_positions(g: dict, axis: int, tap: int) -> np.ndarray:
    """Input coordinates along one axis read by one kernel tap, for each output position."""
    o = np.arange(g["out"][axis])
    return o * g["strides"][axis] - g["pads"][axis] + tap * g["dilations"][axis]


def window_counts(g: dict, in_sizes: list[int], include_pad: bool) -> np.ndarray:
    """Elements per window (product over axes): the divisor of average pooling."""
    n = len(in_sizes)
    total = np.ones((), dtype=np.float64)
    for axis in range(n):
        lo = -g["pads"][axis] if include_pad else 0
        hi = in_sizes[axis] + (g["pads"][axis + n] if include_pad else 0)
        count = np.zeros(g["out"][axis], dtype=np.float64)
        for t in range(g["kernel"][axis]):
            p = tap_positions(g, axis, t)
            count += (p >= lo) & (p < hi)
        total = np.multiply.outer(total, count)
    return total


def max_pool(x: np.ndarray, g: dict, out: np.ndarray | None) -> np.ndarray:
    """Windowed maximum of x (N, C, *S), one strided maximum per kernel tap."""
    xp = padded(x, g, lowest(x.dtype))
    shape = x.shape[:2] + tuple(g["out"])
    y = out if out is not None else np.empty(shape, dtype=x.dtype)
    first = True
    for _, index in window_taps(g):
        if first:
            np.copyto(y, xp[index])
            first = False
        else:
            np.maximum(y, xp[index], out=y)
    return y


def max_pool_indices(x: np.ndarray, g: dict, storage_order: int) -> tuple[np.ndarray, np.ndarray]:
    """Windowed maximum and the flat input index of the first maximum of each window."""
    n = len(g["kernel"])
    in_sizes = list(x.shape[2:])
    xp = padded(x, g, lowest(x.dtype))
    shape = x.shape[:2] + tuple(g["out"])
    if storage_order:
        steps = [int(np.prod(in_sizes[:i], dtype=np.int64)) for i in range(n)]
    else:
        steps = [int(np.prod(in_sizes[i + 1:], dtype=np.int64)) for i in range(n)]
    plane = int(np.prod(in_sizes, dtype=np.int64))
    base = (np.arange(x.shape[0] * x.shape[1], dtype=np.int64) * plane).reshape(x.shape[:2] + (1,) * n)
    best = np.empty(shape, dtype=x.dtype)
    best_idx = np.zeros(shape, dtype=np.int64)
    best_ok = np.zeros(shape, dtype=bool)
    for taps, index in window_taps(g):
        flat = np.zeros((1,) * n, dtype=np.int64)
        ok = np.ones((1,) * n, dtype=bool)
        for axis, t in enumerate(taps):
            p = tap_positions(g, axis, t)
            view = (None,) * axis + (slice(None),) + (None,) * (n - axis - 1)
            flat = flat + (p * steps[axis])[view]
            ok = ok & ((p >= 0) & (p < in_sizes[axis]))[view]
        v = xp[index]
        better = ok & ((v > best) | ~best_ok)
        np.copyto(best, v, where=better)
        np.copyto(best_idx, np.broadcast_to(flat, shape), where=better)
        best_ok |= better
    return best, best_idx + base


def sum_pool(x: np.ndarray, g: dict, power: float | None = None) -> np.ndarray:
    """Windowed sum of x (or of |x|**power), zero padded."""
    xp = padded(x, g, 0)
    if power is not None:
        xp = np.abs(xp) if power == 1 else (np.square(xp) if power == 2 else np.abs(xp) ** power)
    shape = x.shape[:2] + tuple(g["out"])
    acc = np.zeros(shape, dtype=xp.dtype)
    for _, index in window_taps(g):
        np.add(acc, xp[index], out=acc)
    return acc


def scatter_windows(cols: np.ndarray, kernel: list[int], strides: list[int], dilations: list[int],
                    pads: list[int], out_sizes: list[int]) -> np.ndarray:
    """Sum window columns back into an image (col2im).

    ``cols`` is (N, C, *kernel, *in) and tap t of position p lands on output
    coordinate p * stride + t * dilation - pad_begin; the result is (N, C, *out).
    """
    n = len(kernel)
    in_sizes = cols.shape[2 + n:]
    starts, lengths = [], []
    for i in range(n):
        full = (in_sizes[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1
        start = min(0, pads[i])
        starts.append(start)
        lengths.append(max(full, pads[i] + out_sizes[i]) - start)
    buf = np.zeros(cols.shape[:2] + tuple(lengths), dtype=cols.dtype)
    for taps in itertools.product(*[range(k) for k in kernel]):
        index = (slice(None), slice(None)) + tuple(
            slice(t * d - s0, t * d - s0 + (m - 1) * s + 1, s)
            for t, d, s0, m, s in zip(taps, dilations, starts, in_sizes, strides))
        buf[index] += cols[(slice(None), slice(None)) + taps]
    crop = (slice(None), slice(None)) + tuple(slice(p - s0, p - s0 + o) for p, s0, o in zip(pads, starts, out_sizes))
    return buf[crop]


# ------------------------------------------------------------------ resampling
def source_coords(transform: str, length_in: int, length_out: int, scale: float,
                  roi: tuple[float, float] | None) -> np.ndarray:
    """Input coordinate of every output position along one axis (Resize's transforms)."""
    y = np.arange(length_out, dtype=np.float64)
    # NOTE: like onnxruntime and the onnx reference, the fractional output width
    # (scale * length_in) enters align_corners, tf_crop_and_resize and half_pixel_symmetric.
    width = scale * length_in
    if transform == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if transform == "half_pixel_symmetric":
        offset = length_in / 2 * (1 - length_out / width)
        return offset + (y + 0.5) / scale - 0.5
    if transform == "pytorch_half_pixel":
        return (y + 0.5) / scale - 0.5 if length_out > 1 else np.zeros_like(y)
    if transform == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale
    if transform == "align_corners":
        return y * (length_in - 1) / (width - 1) if width != 1 else np.zeros_like(y)
    if transform == "asymmetric":
        return y / scale
    if transform == "tf_crop_and_resize":
        start, end = roi if roi is not None else (0.0, 1.0)
        if width == 1:
            return np.full_like(y, (end - start) * (length_in - 1) / 2 + start * (length_in - 1))
        return y * (end - start) * (length_in - 1) / (width - 1) + start * (length_in - 1)
    raise ValueError(f"unknown coordinate_transformation_mode '{transform}'")


def nearest_index(x: np.ndarray, mode: str) -> np.ndarray:
    """Round source coordinates to an input index by nearest_mode."""
    if mode == "round_prefer_floor":
        return np.ceil(x - 0.5)
    if mode == "round_prefer_ceil":
        return np.floor(x + 0.5)
    if mode == "floor":
        return np.floor(x)
    if mode == "ceil":
        return np.ceil(x)
    raise ValueError(f"unknown nearest_mode '{mode}'")


def _cubic(t: np.ndarray, a: float) -> np.ndarray:
    """Keys cubic convolution kernel with coefficient a."""
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def axis_taps(attrs: dict, length_in: int, length_out: int, scale: float,
              roi: tuple[float, float] | None) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Input indices (out, taps), weights (out, taps; None for nearest) and extrapolated mask."""
    x = source_coords(attrs["coordinate_transformation_mode"], length_in, length_out, scale, roi)
    outside = None
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        outside = (x < 0) | (x > length_in - 1)
        outside = outside if outside.any() else None
    mode = attrs["mode"]
    if mode == "nearest":
        idx = nearest_index(x, attrs["nearest_mode"]).astype(np.int64)
        return np.clip(idx, 0, length_in - 1)[:, None].astype(np.intp), None, outside
    stretch = min(scale, 1.0) if attrs.get("antialias") else 1.0
    reach = 1.0 if mode == "linear" else 2.0
    start = int(np.floor(-reach / stretch)) + 1
    taps = 2 - 2 * start
    # NOTE: the window of an integral coordinate starts one further left (as the reference does);
    # the extra tap then has zero weight.
    base = np.ceil(x).astype(np.int64) - 1 + start
    idx = base[:, None] + np.arange(taps)[None, :]
    t = (idx - x[:, None]) * stretch
    w = np.clip(1 - np.abs(t), 0, None) if mode == "linear" else _cubic(t, float(attrs["cubic_coeff_a"]))
    if attrs.get("exclude_outside"):
        w = np.where((idx < 0) | (idx >= length_in), 0.0, w)
    if attrs.get("antialias") or attrs.get("exclude_outside"):
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, length_in - 1).astype(np.intp), w, outside


def resample_plan(attrs: dict, in_shape: tuple, targets: dict) -> list[tuple]:
    """Per resized axis: (axis, indices, weights, outside) for ``resample``."""
    plan = []
    rank = len(in_shape)
    transform = attrs["coordinate_transformation_mode"]
    for axis in range(rank):
        n_in, n_out, scale = in_shape[axis], targets["out"][axis], targets["scales"][axis]
        roi = targets["roi"][axis] if targets["roi"] is not None else None
        identity = n_in == n_out and scale == 1.0 and (
            transform != "tf_crop_and_resize" or roi is None or roi == (0.0, 1.0))
        if identity and transform != "tf_half_pixel_for_nn":
            continue
        idx, w, outside = axis_taps(attrs, n_in, n_out, scale, roi)
        plan.append((axis, idx, w, outside))
    return plan


def resample(x: np.ndarray, plan: list[tuple], extrapolation: float, dtype: np.dtype) -> np.ndarray:
    """Apply a resample plan axis by axis; integer outputs are rounded and saturated."""
    rank = x.ndim
    work = x.dtype if x.dtype.kind == "f" else np.dtype(np.float64)
    if all(w is None for _, _, w, _ in plan) and all(o is None for _, _, _, o in plan):
        if not plan:
            return x.copy()
        return _nearest(x, {axis: idx[:, 0] for axis, idx, _, _ in plan})
    y = x
    for axis, idx, w, outside in plan:
        view = (None,) * axis + (slice(None),) + (None,) * (rank - axis - 1)
        if w is None:
            y = np.take(y, idx[:, 0], axis=axis)
        else:
            acc = None
            for j in range(idx.shape[1]):
                term = np.take(y, idx[:, j], axis=axis).astype(work, copy=False) * w[:, j].astype(work)[view]
                acc = term if acc is None else np.add(acc, term, out=acc)
            y = acc
        if outside is not None:
            y = np.where(outside[view], np.asarray(extrapolation, dtype=work), y)
    y = np.asarray(y)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(np.round(y), info.min, info.max).astype(dtype)
    return y.astype(dtype, copy=False)


# ------------------------------------------------------------------ point sampling
def reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Reflect coordinates at the borders lo and hi until they fall inside."""
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    below, above = x < lo, x > hi
    dx = np.where(below, lo - x, np.where(above, x - hi, 0.0))
    n = np.floor(dx / span)
    r = dx - n * span
    even = (n % 2) == 0
    from_below = np.where(even, lo + r, hi - r)
    from_above = np.where(even, hi - r, lo + r)
    return np.where(below, from_below, np.where(above, from_above, x))


def axis_interp(x: np.ndarray, mode: str, cubic_a: float = -0.75) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """(integer tap position, weight) pairs interpolating at coordinates x along one axis."""
    if mode == "nearest":
        return [(x.astype(np.int64), None)]
    x0 = np.floor(x)
    t = x - x0
    x0 = x0.astype(np.int64)
    if mode == "linear":
        return [(x0, 1 - t), (x0 + 1, t)]
    return [(x0 + k - 1, _cubic(t - (k - 1), cubic_a)) for k in range(4)]


def fetch_index(i: np.ndarray, size: int, padding: str, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray | None]:
    """Valid index of tap positions by padding mode, and where zero padding applies."""
    if padding == "zeros":
        valid = (i >= 0) & (i < size)
        return np.clip(i, 0, size - 1), valid
    if padding == "border":
        return np.clip(i, 0, size - 1), None
    r = np.trunc(reflect(i.astype(np.float64), lo, hi)).astype(np.int64)
    return np.clip(r, 0, size - 1), None


def sample_points(flat: np.ndarray, sizes: list[int], coords: list[np.ndarray], mode: str, padding: str,
                  borders: list[tuple[float, float]], work: np.dtype) -> np.ndarray:
    """Interpolate flat (B, C, prod(sizes)) at points coords[axis] (B, Q): returns (B, C, Q)."""
    per_axis = []
    for axis, x in enumerate(coords):
        taps = []
        for pos, w in axis_interp(x, mode):
            idx, valid = fetch_index(pos, sizes[axis], padding, *borders[axis])
            if valid is not None:
                w = valid.astype(np.float64) if w is None else w * valid
            taps.append((idx, w))
        per_axis.append(taps)
    steps = [int(np.prod(sizes[a + 1:], dtype=np.int64)) for a in range(len(sizes))]
    out = np.zeros(flat.shape[:2] + coords[0].shape[1:], dtype=work)
    for combo in itertools.product(*per_axis):
        index = sum(idx * step for (idx, _), step in zip(combo, steps))
        weight = None
        for _, w in combo:
            if w is not None:
                weight = w if weight is None else weight * w
        values = np.take_along_axis(flat, index[:, None, :], axis=2)
        out += values if weight is None else values * weight[:, None, :].astype(work)
    return out


def _nearest(x: np.ndarray, picks: dict[int, np.ndarray]) -> np.ndarray:
    """Gather x at per-axis indices in one advanced-indexing pass."""
    first, last = min(picks), max(picks)
    # NOTE: adjacent advanced indices keep their place in the result, so the
    # resized axes must form one block; the axes between get an arange.
    index: list = [slice(None)] * x.ndim
    block = last - first + 1
    for k, axis in enumerate(range(first, last + 1)):
        idx = picks.get(axis, np.arange(x.shape[axis]))
        index[axis] = idx.reshape((-1,) + (1,) * (block - k - 1))
    return x[tuple(index)]
