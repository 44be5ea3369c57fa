"""What the fast 2-D convolution kernels of both layouts share (op_conv.py: NCHW, _conv_nhwc.py: NHWC):
which nodes they accept, their static geometry (Conv2d), zero padding into scratch, which nodes Winograd
F(4x4, 3x3) takes, and its transform matrices and weight transform."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator.base import Info
from nnhal.operator.table import get_prototype


def geometry(node: Node, ins: list[Info | None], outs: list[Info], dynamic: bool = False) -> dict | None:
    """Kernel, strides, dilations and pads (pads = [top, left, bottom, right]) when the fast 2-D kernels
    of either layout can run the node: 4-D float32/float64 input with a static shape, constant 4-D
    weights (and a constant (M,) bias), non-negative pads; else None. ``dynamic``: the weights (and the
    bias) are instead run-time tensors of static shape and the input's dtype (Siamese trackers'
    cross-correlations, dynamic filters), which the kernel packs every run."""
    x, w = ins[0], ins[1]
    if x is None or w is None or x.shape is None or len(x.shape) != 4 or not x.static:
        return None
    if (w.value is None) != dynamic or (w.dtype if dynamic else w.value.dtype) != x.dtype:
        return None
    wshape = None if dynamic and not w.static else tuple(w.shape if dynamic else w.value.shape)
    if x.dtype not in (np.float32, np.float64) or wshape is None or len(wshape) != 4:
        return None
    b = ins[2] if len(ins) > 2 else None
    if b is not None and (b.value is None and (not dynamic or b.dtype != x.dtype)
                          or tuple(b.shape or () if b.value is None else b.value.shape) != (wshape[0],)):
        return None
    if outs[0].shape is None or not outs[0].static or len(outs[0].shape) != 4:
        return None
    group = node.attrs["group"]
    if x.shape[1] != wshape[1] * group or wshape[0] % group:
        return None
    g = get_prototype("", "Conv").geometry(node, x.shape, wshape)
    if any(p < 0 for p in g["pads"]) or list(g["kernel"]) != list(wshape[2:]):
        return None
    return g


@dataclass(frozen=True)
class Conv2d:
    """The static geometry of a 2-D convolution a fast kernel prepares for (shapes in ONNX's NCHW terms)."""

    n: int
    c: int
    h: int
    w: int
    m: int
    group: int
    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads: tuple[int, int, int, int]      # top, left, bottom, right
    oh: int
    ow: int
    dtype: np.dtype

    @property
    def cg(self) -> int:
        return self.c // self.group

    @property
    def mg(self) -> int:
        return self.m // self.group

    @property
    def hp(self) -> int:
        return self.h + self.pads[0] + self.pads[2]

    @property
    def wp(self) -> int:
        return self.w + self.pads[1] + self.pads[3]

    @property
    def padded(self) -> bool:
        return any(self.pads)


def conv2d(node: Node, ins: list[Info | None], outs: list[Info], dynamic: bool = False) -> Conv2d:
    """The geometry of a node that ``geometry`` accepts (the kernels' score checked it)."""
    g = geometry(node, ins, outs, dynamic)
    n, c, h, w = ins[0].shape
    oh, ow = outs[0].shape[2:]
    m = (ins[1].shape if dynamic else ins[1].value.shape)[0]
    return Conv2d(n, c, h, w, m, node.attrs["group"], tuple(g["kernel"]), tuple(g["strides"]),
                  tuple(g["dilations"]), tuple(g["pads"]), oh, ow, np.dtype(outs[0].dtype))


def pad_into(xp: np.ndarray, x: np.ndarray, pads: tuple[int, ...], channels_last: bool = False) -> None:
    """x (..., H, W) or, channels last, (..., H, W, C) into the scratch xp of the padded shape: zero
    borders, then the interior."""
    pt, pl, pb, pr = pads
    c = (slice(None),) if channels_last else ()
    h, w = x.shape[-3:-1] if channels_last else x.shape[-2:]
    rows = slice(pt, pt + h)
    if pt:
        xp[(Ellipsis, slice(None, pt), slice(None), *c)] = 0
    if pb:
        xp[(Ellipsis, slice(pt + h, None), slice(None), *c)] = 0
    if pl:
        xp[(Ellipsis, rows, slice(None, pl), *c)] = 0
    if pr:
        xp[(Ellipsis, rows, slice(pl + w, None), *c)] = 0
    xp[(Ellipsis, rows, slice(pl, pl + w), *c)] = x


# ------------------------------------------------------------------ Winograd F(4x4, 3x3)
def winograd_fits(node: Node, ins: list[Info | None], outs: list[Info]) -> tuple[int, int] | None:
    """(smallest channel count, smallest output side) of a 3x3 stride-1 undilated group-1 convolution the
    fast kernels accept, the shapes each layout's Winograd threshold is measured on; else None."""
    g = geometry(node, ins, outs)
    if g is None or node.attrs["group"] != 1 or list(g["kernel"]) != [3, 3]:
        return None
    if list(g["strides"]) != [1, 1] or list(g["dilations"]) != [1, 1]:
        return None
    return min(ins[1].value.shape[:2]), min(outs[0].shape[2:])


# Points 0, 1, -1, 2, -2 and infinity (Lavin & Gray). Every transform is one GEMM over all tiles
# and channels at once (the 2-D transforms as Kronecker products, 36x36 and 16x36), so numpy does no
# per-tile work: 36 multiplies per 16 outputs instead of 144.
BT = np.array([[4, 0, -5, 0, 1, 0],
               [0, -4, -4, 1, 1, 0],
               [0, 4, -4, -1, 1, 0],
               [0, -2, -1, 2, 1, 0],
               [0, 2, -1, -2, 1, 0],
               [0, 4, 0, -5, 0, 1]], dtype=np.float64)
G = np.array([[1 / 4, 0, 0],
              [-1 / 6, -1 / 6, -1 / 6],
              [-1 / 6, 1 / 6, -1 / 6],
              [1 / 24, 1 / 12, 1 / 6],
              [1 / 24, -1 / 12, 1 / 6],
              [0, 0, 1]], dtype=np.float64)
AT = np.array([[1, 1, 1, 1, 1, 0],
               [0, 1, -1, 2, -2, 0],
               [0, 1, 1, 4, 4, 0],
               [0, 1, -1, 8, -8, 1]], dtype=np.float64)


def winograd_transforms(dtype) -> tuple[np.ndarray, np.ndarray]:
    """(kron(BT, BT) (36, 36), kron(AT, AT) (16, 36)) in ``dtype``: the 2-D input and output transforms."""
    return np.kron(BT, BT).astype(dtype), np.kron(AT, AT).astype(dtype)


def winograd_weights(w: np.ndarray, dtype) -> np.ndarray:
    """3x3 weights (M, C, 3, 3) -> U (36, M, C) = G g G^T per (out, in) channel pair, folded in float64."""
    m, c = w.shape[:2]
    u = np.empty((6, 6, m, c), dtype)
    step = max(1, (1 << 18) // (36 * c))     # output channels per chunk: float64 temporaries of ~2 MB
    for lo in range(0, m, step):
        t = np.tensordot(w[lo:lo + step].astype(np.float64), G, axes=([3], [1]))   # (m, C, 3, 6): g G^T
        t = np.tensordot(G, t, axes=([1], [2]))                                    # (6, m, C, 6): G g G^T
        u[:, :, lo:lo + step] = t.transpose(0, 3, 1, 2)
    return u.reshape(36, m, c)
