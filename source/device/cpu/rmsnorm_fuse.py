"""The CPU plan's RMSNorm fusion: the exported element-wise spelling of an RMS normalization becomes one native step.

torch.onnx exports a Llama-style RMSNorm (``x / sqrt(mean(x^2, -1) + eps) * w``, or HF's
``x * rsqrt(...) * w``) as ``Pow(x, 2)`` (or ``Mul(x, x)``) -> ``ReduceMean`` over the last axis with keepdims ->
``Add(eps)`` -> ``Sqrt`` -> ``Div(x, .)`` (or ``Reciprocal`` -> ``Mul(x, .)``) [-> ``Mul`` by a constant of
the last axis' width], six steps and four full-width passes per norm, two per layer in a decoder. On a decode
step (one row of 256-512) each step is a few microseconds of dispatch against well under one of arithmetic.

``fuse_rms_norms`` replaces each such chain, float32 of static shape, by one RMSNormalization node (opset 23,
the weight as its scale; ones when the chain has no final Mul) run by kernels/layer_normalization.py
``RMSNormalizationNative`` (native/kernels.c ``nn_rmsnorm_f32``: the mean square in float32 over 16 lanes, then
``x / s * w``; the chain's numpy sum is pairwise, so the two agree to float32 rounding, not bit for bit). Every
intermediate must have one reader and not leave the subgraph; anything else keeps the separate steps.
"""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.fusions import Chosen, _readers, _scalar, sole_reader
from nnhal.device.cpu.kernels import select
from nnhal.device.cpu.kernels.layer_normalization import RMSNormalizationNative
from nnhal.graph.node import Node
from nnhal.operator.base import Info

_F32 = np.dtype(np.float32)


def _eps(info: Info | None) -> float | None:
    """A constant float32 single-element value that is a usable epsilon (finite, >= 0), else None."""
    if info is None or info.value is None or info.dtype != _F32 or np.asarray(info.value).size != 1:
        return None
    v = float(np.asarray(info.value).reshape(()))
    return v if np.isfinite(v) and v >= 0 else None


def _last_axis(entry: Chosen, rank: int) -> bool:
    """Whether a ReduceMean averages exactly the last axis of a rank-``rank`` input with keepdims."""
    node = entry.node
    if not node.attrs.get("keepdims", 1):
        return False
    if node.attrs.get("axes") is not None:
        axes = list(node.attrs["axes"])
    elif len(node.inputs) > 1 and node.inputs[1]:
        info = entry.ins[1]
        if info is None or info.value is None:
            return False
        axes = [int(a) for a in np.asarray(info.value).reshape(-1)]
    else:
        return False
    return len(axes) == 1 and axes[0] in (-1, rank - 1)


def fuse_rms_norms(chosen: list[Chosen], external: set[str], constants: dict[str, np.ndarray]) -> list[Chosen]:
    """Each RMSNorm chain (module docstring) becomes one RMSNormalization node; a ones scale made for a chain
    without a weight goes into ``constants``."""
    reads, reader, producer = _readers(chosen)
    dropped: set[int] = set()
    replaced: dict[int, Chosen] = {}

    def follow(name: str, ops: tuple[str, ...]) -> int | None:
        return sole_reader(chosen, reads, reader, external, dropped, name, ops)

    def other(entry: Chosen, name: str) -> tuple[str, Info | None] | None:
        """The operand of a binary node that is not ``name`` (``name`` read exactly once)."""
        ins = entry.node.inputs
        if len(ins) != 2 or ins.count(name) != 1:
            return None
        k = 1 if ins[0] == name else 0
        return ins[k], entry.ins[k]

    for pos, entry in enumerate(chosen):
        node = entry.node
        if node.op_type not in ("Pow", "Mul") or node.domain or pos in dropped or len(node.inputs) != 2:
            continue
        x = node.inputs[0]
        xi = entry.ins[0]
        if not x or xi is None or xi.dtype != _F32 or xi.shape is None or not xi.static or not xi.shape \
                or 0 in xi.shape or tuple(entry.outs[0].shape or ()) != tuple(xi.shape):
            continue
        if node.op_type == "Pow" and not _scalar(entry.ins[1], 2.0, _F32):
            continue
        if node.op_type == "Mul" and node.inputs[1] != x:
            continue
        shape = tuple(xi.shape)
        width = shape[-1]
        j_mean = follow(node.outputs[0], ("ReduceMean",))
        if j_mean is None or not _last_axis(chosen[j_mean], len(shape)):
            continue
        j_add = follow(chosen[j_mean].node.outputs[0], ("Add",))
        if j_add is None:
            continue
        eps_side = other(chosen[j_add], chosen[j_mean].node.outputs[0])
        eps = None if eps_side is None else _eps(eps_side[1])
        if eps is None:
            continue
        j_sqrt = follow(chosen[j_add].node.outputs[0], ("Sqrt",))
        if j_sqrt is None:
            continue
        root = chosen[j_sqrt].node.outputs[0]
        j_div = follow(root, ("Div", "Reciprocal"))
        if j_div is None:
            continue
        chain = [pos, j_mean, j_add, j_sqrt, j_div]
        if chosen[j_div].node.op_type == "Div":
            div = chosen[j_div].node
            if len(div.inputs) != 2 or div.inputs[0] != x or div.inputs[1] != root:
                continue
        else:
            j_mul = follow(chosen[j_div].node.outputs[0], ("Mul",))
            side = None if j_mul is None else other(chosen[j_mul], chosen[j_div].node.outputs[0])
            if side is None or side[0] != x:
                continue
            chain.append(j_mul)
        if tuple(chosen[chain[-1]].outs[0].shape or ()) != shape:
            continue
        s_value = np.ones(width, np.float32)
        j_w = follow(chosen[chain[-1]].node.outputs[0], ("Mul",))
        side = None if j_w is None else other(chosen[j_w], chosen[chain[-1]].node.outputs[0])
        w = None if side is None else side[1]
        if w is not None and w.value is not None and w.dtype == _F32 and np.asarray(w.value).size == width \
                and np.asarray(w.value).ndim <= len(shape) and np.asarray(w.value).shape[-1:] == (width,) \
                and tuple(chosen[j_w].outs[0].shape or ()) == shape:
            s_value = np.ascontiguousarray(np.asarray(w.value, np.float32).reshape(-1))
            chain.append(j_w)
        last = chosen[chain[-1]]
        scale = f"{node.name}/rms_norm_scale"
        rms = Node(f"{node.name}/rms_norm", "RMSNormalization", [x, scale], [last.node.outputs[0]],
                   {"axis": -1, "epsilon": eps, "stash_type": 1}, opset=23, version=23)
        r_ins = [xi, Info(_F32, (width,), s_value)]
        kernel = select(rms, r_ins, list(last.outs))
        if not isinstance(kernel, RMSNormalizationNative):
            continue
        constants[scale] = s_value
        replaced[chain[-1]] = Chosen(rms, kernel, r_ins, list(last.outs))
        dropped.update(chain[:-1])
    return [replaced.get(pos, entry) for pos, entry in enumerate(chosen) if pos not in dropped]
