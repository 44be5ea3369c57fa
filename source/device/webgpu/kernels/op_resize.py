"""Resize (and Upsample): nearest and linear (multilinear over the resized axes), with the coordinate
transformations half_pixel, pytorch_half_pixel, half_pixel_symmetric, align_corners and asymmetric.
Neighbours outside the input take the edge value, as the ONNX reference pads."""
from __future__ import annotations

import numpy as np

from nnhal.device.device import Candidate
from nnhal.device.webgpu.kernels._index import index_launch
from nnhal.device.webgpu.kernels._wgsl import lit, strides
from nnhal.device.webgpu.kernels.base import Emitter
from nnhal.graph.node import Node

OPS = ("Resize", "Upsample")
MODES = ("half_pixel", "pytorch_half_pixel", "half_pixel_symmetric", "align_corners", "asymmetric")
NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def why_not(c: Candidate) -> str | None:
    node = c.node
    x = c.inputs[0]
    if x is None or not x.static or x.dtype is None or x.dtype.name != "float32":
        return f"{node.op_type} needs a float32 input of known shape"
    if c.outputs[0] is None or not c.outputs[0].static:
        return f"{node.op_type} output shape is not known"
    mode = node.attrs.get("mode", "nearest")
    if mode not in ("nearest", "linear", "bilinear"):
        return f"{node.op_type} mode '{mode}' is not implemented (nearest and linear are)"
    ctm = node.attrs.get("coordinate_transformation_mode", "half_pixel" if node.version >= 11 else "asymmetric")
    if node.op_type == "Resize" and node.version >= 11 and ctm not in MODES:
        return f"Resize coordinate_transformation_mode '{ctm}' is not implemented"
    if node.attrs.get("nearest_mode", "round_prefer_floor") not in NEAREST:
        return f"Resize nearest_mode '{node.attrs.get('nearest_mode')}' is not implemented"
    if node.attrs.get("antialias", 0):
        return "Resize with antialias is not implemented"
    if node.attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        return "Resize keep_aspect_ratio_policy other than 'stretch' is not implemented"
    scales_at = 1 if node.op_type == "Upsample" or node.version < 11 else 2
    if len(c.inputs) > scales_at and node.inputs[scales_at]:
        if c.inputs[scales_at] is None or c.inputs[scales_at].value is None:
            return f"{node.op_type} scales must be constant"
    return None


def _scales(node: Node, em: Emitter, in_shape: list[int], out_shape: list[int]) -> list[float]:
    rank = len(in_shape)
    if node.op_type == "Upsample" and node.version < 9:
        values = [float(s) for s in node.attrs["scales"]]
    else:
        at = 1 if node.op_type == "Upsample" or node.version < 11 else 2
        given = em.value(node.inputs[at]) if len(node.inputs) > at and node.inputs[at] else None
        if given is None or np.size(given) == 0:
            return [o / i for o, i in zip(out_shape, in_shape)]
        values = [float(s) for s in np.ravel(given)]
    axes = [int(a) % rank for a in node.attrs.get("axes") or range(rank)]
    full = [1.0] * rank
    for a, s in zip(axes, values):
        full[a] = s
    return full


def _coordinate(ctm: str, x: str, scale: float, n_in: int, n_out: int) -> str:
    s = lit(scale)
    if ctm == "asymmetric":
        return f"{x} / {s}"
    if ctm == "align_corners":
        return "0.0" if n_out == 1 else f"{x} * {lit((n_in - 1) / (n_out - 1))}"
    if ctm == "pytorch_half_pixel" and n_out == 1:
        return "0.0"
    if ctm == "half_pixel_symmetric":
        adjust = n_out / (scale * n_in)
        offset = n_in / 2 * (1 - adjust)
        return f"{lit(offset)} + ({x} + 0.5) / {s} - 0.5"
    return f"({x} + 0.5) / {s} - 0.5"


def _nearest(mode: str, x: str) -> str:
    if mode == "floor":
        return f"floor({x})"
    if mode == "ceil":
        return f"ceil({x})"
    if mode == "round_prefer_ceil":
        return f"floor({x} + 0.5)"
    return f"ceil({x} - 0.5)"


def lower(node: Node, em: Emitter, epilogue=None) -> None:
    in_shape = [int(d) for d in em.shape(node.inputs[0])]
    out_shape = [int(d) for d in em.shape(node.outputs[0])]
    scales = _scales(node, em, in_shape, out_shape)
    default = "half_pixel" if node.op_type == "Resize" and node.version >= 11 else "asymmetric"
    ctm = node.attrs.get("coordinate_transformation_mode", default)
    mode = node.attrs.get("mode", "nearest")
    st = strides(in_shape)
    moving = [a for a in range(len(in_shape)) if in_shape[a] != out_shape[a] or scales[a] != 1.0]
    body = []
    for a in moving:
        body.append(f"let x{a} = {_coordinate(ctm, f'f32(c{a})', scales[a], in_shape[a], out_shape[a])};")
    fixed = [f"c{a} * {st[a]}u" for a in range(len(in_shape)) if a not in moving]
    base = " + ".join(fixed) or "0u"
    if mode == "nearest":
        for a in moving:
            body.append(f"let i{a} = "
                        f"u32(clamp(i32({_nearest(node.attrs.get('nearest_mode', 'round_prefer_floor'), f'x{a}')}),"
                        f" 0, {in_shape[a] - 1}));")
        index = " + ".join([base] + [f"i{a} * {st[a]}u" for a in moving])
        body.append(f"let val = in0[{index}];")
    else:
        for a in moving:
            body.append(f"let f{a} = floor(x{a});")
            body.append(f"let w{a} = x{a} - f{a};")
            body.append(f"let lo{a} = u32(clamp(i32(f{a}), 0, {in_shape[a] - 1}));")
            body.append(f"let hi{a} = u32(clamp(i32(f{a}) + 1, 0, {in_shape[a] - 1}));")
        body.append("var val = 0.0;")
        for corner in range(1 << len(moving)):
            weight, terms = [], [base]
            for bit, a in enumerate(moving):
                upper = (corner >> bit) & 1
                weight.append(f"w{a}" if upper else f"(1.0 - w{a})")
                terms.append(f"{'hi' if upper else 'lo'}{a} * {st[a]}u")
            body.append(f"val = val + {' * '.join(weight) or '1.0'} * in0[{' + '.join(terms)}];")
    em.launch(index_launch(em, [node.inputs[0]], node.outputs[0], body, f"Resize({mode})"))
