"""Per-thread scratch memory of the fast CPU kernels (im2col columns, padded inputs, Winograd tiles).

Kernels run one at a time within a thread, so one growing byte buffer per
thread serves every kernel: a kernel asks for its scratch at prepare (so the
buffer is sized before the first run) and takes views of it during its run;
nothing may keep a view past the run call.
"""
from __future__ import annotations

import threading

import numpy as np

from nnhal.errors import InternalError
from nnhal.hostkernels import _blocks
from nnhal.hostkernels.fused import ACTIVATION_KINDS, Activation, activation_of

_local = threading.local()
ALIGN = 64


def reserve(nbytes: int) -> None:
    """Make sure this thread's scratch holds at least ``nbytes``."""
    buf = getattr(_local, "buf", None)
    if buf is None or buf.nbytes < nbytes:
        _local.buf = np.empty(nbytes + ALIGN, dtype=np.uint8)


def scratch(*parts: tuple[tuple[int, ...], np.dtype]) -> list[np.ndarray]:
    """Arrays of the given (shape, dtype) laid one after another in this thread's scratch.

    The views are cached per ``parts`` while the buffer stays the same (building them cost ~12 us a call,
    a fifth of a small convolution); callers must not modify the returned list."""
    cache = getattr(_local, "views", None)
    buf = getattr(_local, "buf", None)
    if cache is None or cache[0] is not buf:
        cache = _local.views = (buf, {})
    try:
        hit = cache[1].get(parts)
    except TypeError:           # a shape given as a list: not cacheable
        return _make_views(parts)
    if hit is not None:
        return hit
    views = _make_views(parts)
    if _local.buf is buf:
        cache[1][parts] = views
    return views


def _make_views(parts) -> list[np.ndarray]:
    sizes = []
    total = 0
    for shape, dtype in parts:
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        sizes.append((total, n))
        total += (n + ALIGN - 1) // ALIGN * ALIGN
    reserve(total)
    buf = _local.buf
    return [np.frombuffer(buf, dtype=dtype, count=int(np.prod(shape, dtype=np.int64)), offset=off).reshape(shape)
            for (off, _), (shape, dtype) in zip(sizes, parts)]


def nbytes_of(*parts: tuple[tuple[int, ...], np.dtype]) -> int:
    return sum((int(np.prod(s, dtype=np.int64)) * np.dtype(d).itemsize + ALIGN - 1) // ALIGN * ALIGN for s, d in parts)


def apply_activation(y: np.ndarray, act: Activation | None, gates: _blocks.Gates = _blocks.NUMPY_GATES) -> None:
    """The fused activation, in place; the smooth and hard gates are those of ``gates``."""
    if act is None:
        return
    kind = act.kind
    if kind == "relu":
        _blocks.relu(y, y)
    elif kind == "clip":
        _blocks.clamp(y, act.lo, act.hi, y)
    elif kind == "silu":
        gates.silu_(y)
    elif kind == "sigmoid":
        gates.sigmoid_(y)
    elif kind == "hardswish":
        gates.hardswish_(y)
    elif kind == "hardsigmoid":
        gates.hardsigmoid_(y, act.alpha, act.beta)
    elif kind == "tanh":
        gates.tanh_(y)
    else:
        raise InternalError(f"fused activation kind {kind!r}: this kernel applies {', '.join(ACTIVATION_KINDS)}")


def fused(run, node, gates: _blocks.Gates = _blocks.NUMPY_GATES):
    """``run`` followed by the activation the CPU plan fused into ``node`` (if any), in its first output
    (its gates those of ``gates``)."""
    act = activation_of(node)
    if act is None:
        return run

    def run_fused(inputs, outputs):
        result = run(inputs, outputs)
        apply_activation(result[0], act, gates)
        return result

    return run_fused
