"""WGSL text helpers shared by the kernels: literals, declarations, index arithmetic, the 1-D grid."""
from __future__ import annotations

import math

import numpy as np

WORKGROUP = 256          # invocations of a 1-D elementwise workgroup
MAX_GROUPS = 65535       # per dimension, the WebGPU default limit


def lit(x: float) -> str:
    """An f32 literal for ``x`` (inf and nan through bit patterns)."""
    v = np.float32(x)
    if np.isnan(v):
        return "bitcast<f32>(0x7fc00000u)"
    if np.isinf(v):
        return "bitcast<f32>(0x7f800000u)" if v > 0 else "bitcast<f32>(0xff800000u)"
    text = repr(float(v))
    return text if ("." in text or "e" in text) else text + ".0"


def decl(binding: int, var: str, elem: str, write: bool) -> str:
    access = "read_write" if write else "read"
    return f"@group(0) @binding({binding}) var<storage, {access}> {var}: array<{elem}>;"


def strides(shape: tuple[int, ...]) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= int(d)
    return out[::-1]


def coords(shape: tuple[int, ...], flat: str, prefix: str = "c") -> list[str]:
    """Statements binding ``{prefix}0..`` to the coordinates of flat index ``flat`` in ``shape``."""
    lines, st = [], strides(shape)
    for i, (d, s) in enumerate(zip(shape, st)):
        expr = f"{flat} / {s}u" if s != 1 else flat
        if i > 0:
            expr = f"({expr}) % {d}u"
        lines.append(f"let {prefix}{i} = {expr};")
    return lines


def broadcast_index(in_shape: tuple[int, ...], out_shape: tuple[int, ...], prefix: str = "c", flat: str = "idx") -> str:
    """The flat index into a tensor of ``in_shape`` broadcast (numpy rules) to ``out_shape`` at coordinates
    ``prefix``."""
    in_shape = tuple(int(d) for d in in_shape)
    if in_shape == tuple(out_shape):
        return flat
    if int(np.prod(in_shape)) == 1:
        return "0u"
    off = len(out_shape) - len(in_shape)
    terms = [f"{prefix}{i + off} * {s}u" if s != 1 else f"{prefix}{i + off}"
             for i, (d, s) in enumerate(zip(in_shape, strides(in_shape))) if d != 1]
    return " + ".join(terms) or "0u"


def grid(total: int) -> tuple[str, tuple[int, int, int]]:
    """A 1-D launch of ``total`` invocations: the main() header computing ``idx`` (with its guard) and the
    workgroups."""
    groups = max(1, math.ceil(total / WORKGROUP))
    gx = min(groups, MAX_GROUPS)
    gy = math.ceil(groups / gx)
    header = (f"@compute @workgroup_size({WORKGROUP})\n"
              f"fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{\n"
              f"  let idx = gid.y * {gx * WORKGROUP}u + gid.x;\n"
              f"  if (idx >= {total}u) {{ return; }}\n")
    return header, (gx, gy, 1)
