"""The vnpu's integer instructions. Every value is an integer; products are
summed exactly (in float32 or float64 GEMMs only where the sum provably fits
the mantissa) and requantized with the fixed-point multipliers."""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from nnhal.device.vnpu.compiler import ADD_SHIFT, Instr
from nnhal.hostkernels.fixedpoint import requantize
from nnhal.hostkernels.windows import im2col


def _to_u8(acc: np.ndarray, zy: int, lo: int, hi: int) -> np.ndarray:
    return np.clip(acc + zy, lo, hi).astype(np.uint8)


def rescale(x: np.ndarray, p: dict) -> np.ndarray:
    if p["identity"]:
        return np.clip(x, p["lo"], p["hi"]).astype(np.uint8) if (p["lo"], p["hi"]) != (0, 255) else x
    return _to_u8(requantize(x.astype(np.int64) - p["zi"], p["m0"], p["shift"]), p["zo"], p["lo"], p["hi"])


def conv(ins: Instr, x: np.ndarray) -> np.ndarray:
    p = ins.params
    g = p["group"]
    ft = p["gemm_dtype"]
    xs = x.astype(ft) - ft.type(p["zx"])               # real zero is 0 after the shift: pad with 0
    win, out_sizes = im2col(xs, p["kernel"], p["strides"], p["dilations"], p["pads"])
    nb = x.shape[0]
    nsp = len(out_sizes)
    perm = (0, 1, *range(2 + nsp, 2 + 2 * nsp), *range(2, 2 + nsp))
    cols = np.ascontiguousarray(win.transpose(perm)).reshape(nb, g, -1, int(np.prod(out_sizes)))
    acc = np.matmul(p["packed"][None], cols).reshape(nb, -1, int(np.prod(out_sizes))).astype(np.int64)
    acc += p["bias"][None, :, None]
    y = requantize(acc, p["m0"][None, :, None], p["shift"][None, :, None])
    return _to_u8(y, p["zy"], p["lo"], p["hi"]).reshape(nb, -1, *out_sizes)


def gemm(ins: Instr, x: np.ndarray) -> np.ndarray:
    p = ins.params
    ft = p["gemm_dtype"]
    lead = x.shape[:-1]
    xs = x.reshape(-1, x.shape[-1]).astype(ft) - ft.type(p["zx"])
    acc = np.matmul(xs, p["packed"]).astype(np.int64) + p["bias"][None, :]
    y = requantize(acc, p["m0"][None, :], p["shift"][None, :])
    return _to_u8(y, p["zy"], p["lo"], p["hi"]).reshape(*lead, -1)


def _windows(x: np.ndarray, p: dict, pad_value: int) -> np.ndarray:
    k, s, pads = p["kernel"], p["strides"], p["pads"]
    if any(pads):
        x = np.pad(x, [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])], constant_values=pad_value)
    win = sliding_window_view(x, k, axis=(2, 3))
    return win[:, :, ::s[0], ::s[1]]


def max_pool(ins: Instr, x: np.ndarray) -> np.ndarray:
    # 0 is the smallest uint8: padding never wins a max over a window holding real values
    return rescale(_windows(x, ins.params, 0).max(axis=(-2, -1)), ins.params)


def avg_pool(ins: Instr, x: np.ndarray) -> np.ndarray:
    p = ins.params
    shifted = x.astype(np.int64) - p["zx"]            # padding counts as real zero
    total = _windows(shifted, p, 0).sum(axis=(-2, -1))
    return _to_u8(requantize(total, p["m0"], p["shift"]), p["zy"], p["lo"], p["hi"])


def add(ins: Instr, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    p = ins.params
    ta = requantize((a.astype(np.int64) - p["za"]) << ADD_SHIFT, *p["ma"])
    tb = requantize((b.astype(np.int64) - p["zb"]) << ADD_SHIFT, *p["mb"])
    return _to_u8(requantize(ta + tb, *p["mo"]), p["zy"], p["lo"], p["hi"])


def mul(ins: Instr, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    p = ins.params
    acc = (a.astype(np.int64) - p["za"]) * (b.astype(np.int64) - p["zb"])
    return _to_u8(requantize(acc, p["m0"], p["shift"]), p["zy"], p["lo"], p["hi"])


def concat(ins: Instr, *xs: np.ndarray) -> np.ndarray:
    p = ins.params
    return np.concatenate([rescale(x, r) for x, r in zip(xs, p["rescales"])], axis=p["axis"])


def reshape(ins: Instr, x: np.ndarray) -> np.ndarray:
    return rescale(x.reshape(ins.params["shape"]), ins.params)


def transpose(ins: Instr, x: np.ndarray) -> np.ndarray:
    return rescale(np.ascontiguousarray(x.transpose(ins.params["perm"])), ins.params)


def rescale_op(ins: Instr, x: np.ndarray) -> np.ndarray:
    return rescale(x, ins.params)


EXECUTE = {
    "conv": conv, "gemm": gemm, "max_pool": max_pool, "avg_pool": avg_pool, "add": add, "mul": mul,
    "concat": concat, "reshape": reshape, "transpose": transpose, "rescale": rescale_op,
}
