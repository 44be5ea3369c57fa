"""The vnpu compiler: a quantized subgraph -> a list of integer instructions.

Weights are packed into the chip's layout at compile time: int8 symmetric
per output channel, laid out as [groups, out/groups, reduction] matrices,
with int32 biases and per-channel fixed-point multipliers. A Relu or Clip
that only follows a Conv/Gemm/MatMul/Add/Mul is fused into its clamp.
Activations are uint8 with the per-tensor parameters the core calibrated.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nnhal.errors import DeviceError, where
from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.subgraph import Subgraph
from nnhal.hostkernels.fixedpoint import quantize_multiplier
from nnhal.operator.table import get_prototype
from nnhal.optimizer.quantize import per_channel_int8

FUSABLE = {"Conv", "Gemm", "MatMul", "Add", "Mul"}
ADD_SHIFT = 20


@dataclass
class Instr:
    """One vnpu instruction: reads uint8 tensors, writes one uint8 tensor."""

    kind: str
    node: str
    inputs: list[str]
    output: str
    params: dict = field(default_factory=dict)


@dataclass
class Program:
    instructions: list[Instr]
    inputs: list[str]
    outputs: list[str]
    shapes: dict[str, tuple]             # every uint8 tensor the program touches
    weight_bytes: int = 0


def _q(graph: Graph, name: str, node: Node) -> tuple[float, int]:
    t = graph.tensors[name]
    if t.quant is None:
        raise DeviceError(f"{where(node, 'vnpu')}: tensor '{name}' has no quantization parameters")
    return float(np.ravel(t.quant.scale)[0]), int(np.ravel(t.quant.zero_point)[0])


def _clamp_for(act: Node | None, graph: Graph, sy: float, zy: int) -> tuple[int, int]:
    lo, hi = 0, 255
    if act is None:
        return lo, hi
    if act.op_type == "Relu":
        return max(lo, zy), hi
    vmin = graph.tensors[act.inputs[1]].value if len(act.inputs) > 1 and act.inputs[1] else None
    vmax = graph.tensors[act.inputs[2]].value if len(act.inputs) > 2 and act.inputs[2] else None
    if vmin is not None:
        lo = max(lo, int(np.clip(np.rint(float(vmin) / sy) + zy, 0, 255)))
    if vmax is not None:
        hi = min(hi, int(np.clip(np.rint(float(vmax) / sy) + zy, 0, 255)))
    return lo, hi


def _gemm_dtype(k: int) -> np.dtype:
    """float32 GEMM is exact while every partial sum stays below 2^24; else float64 (2^53)."""
    return np.dtype(np.float32) if k * 255 * 127 < (1 << 24) else np.dtype(np.float64)


def _weighted(kind: str, node: Node, graph: Graph, x: str, out: str, act: Node | None, w: np.ndarray,
              bias: np.ndarray | None, extra: dict) -> Instr:
    sx, zx = _q(graph, x, node)
    sy, zy = _q(graph, out, act or node)
    wq, sw = per_channel_int8(w)
    m = w.shape[0]
    bq = np.zeros(m, np.int64) if bias is None else np.rint(bias.astype(np.float64) / (sx * sw)).astype(np.int64)
    m0, shift = quantize_multiplier(sx * sw / sy)
    lo, hi = _clamp_for(act, graph, sy, zy)
    k = int(np.prod(w.shape[1:]))
    params = {"zx": zx, "zy": zy, "bias": bq, "m0": m0, "shift": shift, "lo": lo, "hi": hi,
              "wq": wq, "weight_scales": sw, "gemm_dtype": _gemm_dtype(k), **extra}
    return Instr(kind, node.name, [x], out, params)


def _rescale_params(graph: Graph, src: str, dst: str, node: Node, act: Node | None = None) -> dict:
    si, zi = _q(graph, src, node)
    so, zo = _q(graph, dst, act or node)
    m0, shift = quantize_multiplier(si / so)
    lo, hi = _clamp_for(act, graph, so, zo)
    return {"zi": zi, "zo": zo, "m0": m0, "shift": shift, "lo": lo, "hi": hi, "identity": (si, zi) == (so, zo)}


def compile_subgraph(sg: Subgraph) -> Program:
    """Lower the subgraph's nodes to vnpu instructions (raises DeviceError for what it cannot)."""
    graph = sg.graph
    consumers: dict[str, list[Node]] = {}
    for n in sg.nodes:
        for i in n.inputs:
            consumers.setdefault(i, []).append(n)
    fused: set[str] = set()
    instrs: list[Instr] = []
    for node in sg.nodes:
        if node.name in fused:
            continue
        out = node.outputs[0]
        act = None
        if node.op_type in FUSABLE and out not in sg.outputs and len(consumers.get(out, [])) == 1:
            nxt = consumers[out][0]
            if nxt.op_type in ("Relu", "Clip") and nxt.inputs[0] == out:
                act = nxt
                fused.add(nxt.name)
                out = nxt.outputs[0]
        instrs.append(_lower(node, graph, out, act))
    shapes = {}
    for ins in instrs:
        for name in ins.inputs + [ins.output]:
            shapes[name] = tuple(graph.tensors[name].shape)
    weight_bytes = sum(i.params["wq"].nbytes + i.params["bias"].size * 4 for i in instrs if "wq" in i.params)
    return Program(instrs, list(sg.inputs), list(sg.outputs), shapes, weight_bytes)


def _lower(node: Node, graph: Graph, out: str, act: Node | None) -> Instr:
    op = node.op_type
    x = node.inputs[0]
    if op == "Conv":
        proto = get_prototype("", "Conv")
        geo = proto.geometry(node, graph.tensors[x].shape, graph.tensors[node.inputs[1]].shape)
        bias = graph.tensors[node.inputs[2]].value if node.has_input(2) else None
        w = graph.tensors[node.inputs[1]].value
        instr = _weighted("conv", node, graph, x, out, act, w, bias, {"group": node.attrs["group"], **geo})
        g = node.attrs["group"]
        wq = instr.params["wq"]
        instr.params["packed"] = wq.reshape(g, wq.shape[0] // g, -1).astype(instr.params["gemm_dtype"])
        return instr
    if op in ("Gemm", "MatMul"):
        b = graph.tensors[node.inputs[1]].value
        w = b if (op == "Gemm" and node.attrs.get("transB", 0)) else b.T      # [out, reduction]
        bias = None
        if op == "Gemm" and node.has_input(2):
            bias = np.broadcast_to(graph.tensors[node.inputs[2]].value.reshape(-1), (w.shape[0],))
        instr = _weighted("gemm", node, graph, x, out, act, np.ascontiguousarray(w), bias, {})
        instr.params["packed"] = instr.params["wq"].T.astype(instr.params["gemm_dtype"])   # [reduction, out]
        return instr
    if op in ("Relu", "Clip"):
        return Instr("rescale", node.name, [x], out, _rescale_params(graph, x, out, node, node))
    if op == "MaxPool":
        params = _pool_geometry(node, graph, x)
        params.update(_rescale_params(graph, x, out, node))
        return Instr("max_pool", node.name, [x], out, params)
    if op in ("AveragePool", "GlobalAveragePool"):
        shape = graph.tensors[x].shape
        params = _pool_geometry(node, graph, x) if op == "AveragePool" else \
            {"kernel": list(shape[2:]), "strides": [1, 1], "pads": [0, 0, 0, 0]}
        sx, zx = _q(graph, x, node)
        sy, zy = _q(graph, out, node)
        count = int(np.prod(params["kernel"]))
        m0, shift = quantize_multiplier(sx / (sy * count))
        params.update({"zx": zx, "zy": zy, "m0": m0, "shift": shift, "lo": 0, "hi": 255})
        return Instr("avg_pool", node.name, [x], out, params)
    if op in ("Add", "Mul"):
        return _binary(node, graph, out, act)
    if op == "Concat":
        rescales = [_rescale_params(graph, i, out, node) for i in node.inputs]
        consts = {i: _quantize_const(graph, i) for i in node.inputs if graph.tensors[i].is_constant}
        return Instr("concat", node.name, list(node.inputs), out,
                     {"axis": node.attrs["axis"], "rescales": rescales, "consts": consts})
    if op == "Reshape":
        return Instr("reshape", node.name, [x], out,
                     {"shape": tuple(graph.tensors[out].shape), **_rescale_params(graph, x, out, node)})
    if op == "Transpose":
        perm = node.attrs.get("perm") or list(range(len(graph.tensors[x].shape)))[::-1]
        return Instr("transpose", node.name, [x], out, {"perm": list(perm), **_rescale_params(graph, x, out, node)})
    raise DeviceError(f"{where(node, 'vnpu')}: the vnpu compiler has no lowering for {op}")


def _pool_geometry(node: Node, graph: Graph, x: str) -> dict:
    from nnhal.operator.spatial import resolve_pads

    shape = graph.tensors[x].shape
    kernel = list(node.attrs["kernel_shape"])
    strides = list(node.attrs.get("strides") or [1] * len(kernel))
    pads = resolve_pads(node, list(shape[2:]), kernel, strides, [1] * len(kernel))
    return {"kernel": kernel, "strides": strides, "pads": pads}


def _quantize_const(graph: Graph, name: str) -> np.ndarray:
    t = graph.tensors[name]
    scale, zp = float(np.ravel(t.quant.scale)[0]), int(np.ravel(t.quant.zero_point)[0])
    return np.clip(np.rint(t.value.astype(np.float64) / scale) + zp, 0, 255).astype(np.uint8)


def _binary(node: Node, graph: Graph, out: str, act: Node | None) -> Instr:
    a, b = node.inputs[0], node.inputs[1]
    sa, za = _q(graph, a, node)
    sb, zb = _q(graph, b, node)
    sy, zy = _q(graph, out, act or node)
    lo, hi = _clamp_for(act, graph, sy, zy)
    consts = {n: _quantize_const(graph, n) for n in (a, b) if graph.tensors[n].is_constant}
    params = {"za": za, "zb": zb, "zy": zy, "lo": lo, "hi": hi, "consts": consts}
    if node.op_type == "Mul":
        params["m0"], params["shift"] = quantize_multiplier(sa * sb / sy)
        return Instr("mul", node.name, [a, b], out, params)
    twice_max = 2 * max(sa, sb)
    params["ma"] = quantize_multiplier(sa / twice_max)
    params["mb"] = quantize_multiplier(sb / twice_max)
    params["mo"] = quantize_multiplier(twice_max / ((1 << ADD_SHIFT) * sy))
    return Instr("add", node.name, [a, b], out, params)

