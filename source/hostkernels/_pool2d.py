"""Separable 2-D pooling shared by the fast MaxPool and AveragePool kernels.

A kh x kw window reduction is done as a reduction over kw column taps
(stride sw) followed by one over kh row taps (stride sh): kh + kw - 2
full-array ufunc calls instead of kh * kw - 1, on a padded copy kept in the
per-thread scratch.
"""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels import _scratch
from nnhal.operator._nn import pool_geometry


def usable(node, ins, outs, kinds: str = "f") -> dict | None:
    """The pooling geometry when the fast path applies: 4-D static input whose dtype kind is in ``kinds`` (float
    unless told), no dilation."""
    x = ins[0]
    if x is None or x.shape is None or len(x.shape) != 4 or not x.static or x.dtype is None \
            or x.dtype.kind not in kinds:
        return None
    if outs[0].shape is None or not outs[0].static:
        return None
    g = pool_geometry(node, list(x.shape[2:]))
    if any(d != 1 for d in g["dilations"]) or any(p < 0 for p in g["pads"]) \
            or list(g["out"]) != list(outs[0].shape[2:]):
        return None
    if any(o <= 0 for o in g["out"]):
        return None
    return g


def make_pool(g: dict, shape: tuple, dtype: np.dtype, ufunc: np.ufunc, fill):
    """run(x, out) computing the windowed reduction of x (N, C, H, W) into out (N, C, OH, OW)."""
    n, c, h, w = shape
    kh, kw = g["kernel"]
    sh, sw = g["strides"]
    pt, pl = g["pads"][0], g["pads"][1]
    oh, ow = g["out"]
    hp = max(pt + h, (oh - 1) * sh + kh)
    wp = max(pl + w, (ow - 1) * sw + kw)
    padded = (hp, wp) != (h, w)
    parts = ([((n, c, hp, wp), dtype)] if padded else []) + [((n, c, hp, ow), dtype)]
    _scratch.reserve(_scratch.nbytes_of(*parts))
    cols = [slice(j, j + (ow - 1) * sw + 1, sw) for j in range(kw)]
    rows = [slice(i, i + (oh - 1) * sh + 1, sh) for i in range(kh)]

    def run(x, out):
        bufs = _scratch.scratch(*parts)
        if padded:
            xp = bufs[0]
            if pt:
                xp[:, :, :pt] = fill
            if hp > pt + h:
                xp[:, :, pt + h:] = fill
            if pl:
                xp[:, :, pt:pt + h, :pl] = fill
            if wp > pl + w:
                xp[:, :, pt:pt + h, pl + w:] = fill
            xp[:, :, pt:pt + h, pl:pl + w] = x
            x = xp
        r = bufs[-1]
        if kw == 1:
            np.copyto(r, x[..., cols[0]])
        else:
            ufunc(x[..., cols[0]], x[..., cols[1]], out=r)
            for s in cols[2:]:
                ufunc(r, x[..., s], out=r)
        if kh == 1:
            np.copyto(out, r[:, :, rows[0]])
        else:
            ufunc(r[:, :, rows[0]], r[:, :, rows[1]], out=out)
            for s in rows[2:]:
                ufunc(out, r[:, :, s], out=out)
        return out

    return run
