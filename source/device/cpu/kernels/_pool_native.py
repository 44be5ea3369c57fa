"""The native (C) channels-last 2-D pooling behind the NHWC MaxPool and AveragePool kernels.

One pass over the input: every output pixel's window is reduced while its channels are in L1
(kernels.c, nn_pool_nhwc_f32, prepared once as a native.Pool2d), where the numpy kernel (_nhwc.make_pool)
makes a pass per kernel tap over a scratch copy. Unlike that kernel it also runs dilated windows. The output
may be a channel slice of a wider tensor (a Concat's output the CPU planner placed it in): pixels evenly
spaced, channels contiguous (the extension reads the spacing from the output's strides).
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.device.cpu.kernels._io import evenly_spaced_pixels
from nnhal.operator._nn import pool_geometry
from nnhal.operator.base import Info


def geometry(node, ins: list[Info | None], outs: list[Info]) -> dict | None:
    """The pooling geometry when the native kernel runs this node: native kernels loaded, a float32 4-D
    static input, non-negative pads, the inferred output size; else None."""
    x = ins[0]
    if not native.available() or x is None or x.shape is None or len(x.shape) != 4 or not x.static \
            or x.dtype != np.float32 or outs[0].shape is None or not outs[0].static:
        return None
    g = pool_geometry(node, list(x.shape[2:]))
    if any(p < 0 for p in g["pads"]) or list(g["out"]) != list(outs[0].shape[2:]) or any(o <= 0 for o in g["out"]):
        return None
    return g


def make_pool(g: dict, shape: tuple[int, ...], kind: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """run(x, out): the native pooling (``kind`` of native.POOLS) of x (N, H, W, C) into out (N, OH, OW, C),
    whose channel axis is contiguous and whose pixels may be further apart (a channel slice)."""
    n, c, h, w = shape
    oh, ow = g["out"]
    kh, kw = g["kernel"]
    sh, sw = g["strides"]
    dh, dw = g["dilations"]
    pads = g["pads"]
    pool = native.Pool2d((n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, *pads), native.POOLS[kind])
    rows = n * oh

    def run(x: np.ndarray, out: np.ndarray) -> np.ndarray:
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        if not evenly_spaced_pixels(out):
            # NOTE: an output whose pixels are not evenly spaced cannot come from the CPU plan; kept correct anyway
            tmp = np.empty((n, oh, ow, c), np.float32)
            run(x, tmp)
            np.copyto(out, tmp)
            return out
        pool.run(x, out, 0, rows, parallel.native_parts(out.size * 2, rows) if parallel.native_pool() else 1)
        return out

    def bind(x: np.ndarray | None, out: np.ndarray | None) -> Callable[[], None] | None:
        # NOTE: a planned step (straight.bind): the native call on the fixed buffers, split chosen once; None when
        # the run would copy either (a bound call must read its input where it lies)
        if x is None or out is None or x.dtype != np.float32 or out.dtype != np.float32 \
                or x.shape != (n, h, w, c) or out.shape != (n, oh, ow, c) or not x.flags.c_contiguous \
                or not evenly_spaced_pixels(out):
            return None
        return partial(pool.run, x, out, 0, rows, parallel.native_parts(out.size * 2, rows)
                       if parallel.native_pool() else 1)

    run.bind = bind
    return run
