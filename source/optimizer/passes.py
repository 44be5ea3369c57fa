"""Device-independent graph passes run at prerun, after inference and folding.

Each pass takes the (prerun copy of the) graph and rewrites it in place,
returning how many nodes it changed. They must keep every graph output and
the graph's results (within the fp32 tolerance policy).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.tensor import constant
from nnhal.optimizer.constant_adds import fold_constant_adds, split_matmul_batch
from nnhal.optimizer.gemm_reshape import unfold_reshaped_gemm
from nnhal.optimizer.movement import collapse_data_movement
from nnhal.optimizer.pad_fold import fold_pad_into_consumers
from nnhal.optimizer.qdq import fuse_qdq_elementwise
from nnhal.optimizer.sibling_matmuls import merge_row_projections


def remove_dead_nodes(graph: Graph) -> int:
    """Drop nodes none of whose outputs reach a graph output."""
    needed = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if any(o in needed for o in node.outputs if o):
            kept.append(node)
            needed.update(n for n in node.all_inputs if n)
    removed = len(graph.nodes) - len(kept)
    graph.nodes = kept[::-1]
    return removed


# ------------------------------------------------------------------ affine folding
def _const(graph: Graph, name: str) -> np.ndarray | None:
    t = graph.tensors.get(name) if name else None
    return t.value if t is not None and t.is_constant and t.value is not None else None


def _channel_affine(graph: Graph, node: Node, x: str, channels: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(multiplier, offset) per channel (float64, length ``channels``) when ``node`` is an inference
    BatchNormalization, or a Mul/Add by a per-channel constant, applied to the NC... tensor ``x``; else None."""
    t = graph.tensors.get(x)
    if t is None or t.dtype is None or t.dtype.kind != "f" or t.shape is None or len(t.shape) < 2:
        return None
    if len([o for o in node.outputs if o]) != 1 or node.outputs[0] == "" or node.domain:
        return None
    out = graph.tensors.get(node.outputs[0])
    if out is None or out.dtype != t.dtype or out.shape != t.shape:
        return None
    if node.op_type == "BatchNormalization":
        if node.inputs[0] != x or node.attrs.get("training_mode", 0) or node.attrs.get("spatial", 1) != 1:
            return None
        params = [_const(graph, n) for n in node.inputs[1:5]]
        if len(params) != 4 or any(p is None or p.shape != (channels,) for p in params):
            return None
        scale, bias, mean, var = (p.astype(np.float64) for p in params)
        a = scale / np.sqrt(var + float(node.attrs["epsilon"]))
        return a, bias - mean * a
    if node.op_type in ("Mul", "Add") and len(node.inputs) == 2 and x in node.inputs:
        other = node.inputs[1] if node.inputs[0] == x else node.inputs[0]
        if other == x:
            return None
        c = _const(graph, other)
        if c is None or c.dtype != t.dtype or c.ndim > len(t.shape):
            return None
        rank = len(t.shape)
        shape = (1,) * (rank - c.ndim) + c.shape
        if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
            return None
        v = np.broadcast_to(c.reshape(shape)[(0, slice(None)) + (0,) * (rank - 2)].astype(np.float64), (channels,))
        if node.op_type == "Mul":
            return v.copy(), np.zeros(channels)
        return np.ones(channels), v.copy()
    return None


def _new_constant(graph: Graph, base: str, value: np.ndarray) -> str:
    name, k = f"{base}__folded", 0
    while name in graph.tensors:
        k += 1
        name = f"{base}__folded{k}"
    graph.tensors[name] = constant(name, value)
    return name


def fold_affine_into_conv(graph: Graph) -> int:
    """Fold BatchNormalization (inference) and per-channel constant Mul/Add into a preceding Conv, a group-1
    ConvTranspose or Gemm (constant weight and bias) or BatchNormalization, when the intermediate has no other reader
    and is not a graph output. Folded in float64, stored in the weight dtype."""
    changed = 0
    again = True
    while again:
        again = False
        consumers = graph.consumers()
        producers = graph.producers()
        outputs = set(graph.outputs) | set(graph.outer)
        for node in list(graph.nodes):
            if node.op_type not in ("BatchNormalization", "Mul", "Add") or node.domain:
                continue
            x = next((n for n in node.inputs if n in producers), None)
            prod = producers.get(x) if x else None
            if prod is None or x in outputs or len(consumers.get(x, [])) != 1 or prod.domain:
                continue
            if graph.tensors[x].quant is not None:
                continue        # a quantized model requantizes here: folding would skip that step
            if prod.op_type in ("Conv", "ConvTranspose"):
                w = _const(graph, prod.input(1))
                if w is None or w.dtype.kind != "f" or w.ndim < 3:
                    continue
                # NOTE: ConvTranspose's weight is (C, M / group, k...): its output channels on axis 1, taken
                # for group 1 only (a U-Net decoder's or DBNet head's ConvTranspose -> BatchNormalization)
                if prod.op_type == "ConvTranspose" and int(prod.attrs.get("group", 1)) != 1:
                    continue
                channels = w.shape[1 if prod.op_type == "ConvTranspose" else 0]
            elif prod.op_type == "Gemm":
                w = _const(graph, prod.input(1))
                if w is None or w.dtype.kind != "f" or w.ndim != 2 or float(prod.attrs["alpha"]) != 1.0:
                    continue
                channels = w.shape[0] if prod.attrs["transB"] else w.shape[1]
            elif prod.op_type == "BatchNormalization" and node.op_type != "BatchNormalization":
                if prod.attrs.get("training_mode", 0) or len([o for o in prod.outputs if o]) != 1:
                    continue
                params = [_const(graph, n) for n in prod.inputs[1:5]]
                if len(params) != 4 or any(p is None or p.ndim != 1 for p in params):
                    continue
                channels = params[0].shape[0]
            else:
                continue
            affine = _channel_affine(graph, node, x, channels)
            if affine is None:
                continue
            a, b = affine
            if prod.op_type == "BatchNormalization":
                scale, bias = params[0], params[1]
                new_scale = (scale.astype(np.float64) * a).astype(scale.dtype)
                prod.inputs[1] = _new_constant(graph, prod.inputs[1], new_scale)
                new_bias = (bias.astype(np.float64) * a + b).astype(bias.dtype)
                prod.inputs[2] = _new_constant(graph, prod.inputs[2], new_bias)
            else:
                has_bias = prod.has_input(2)
                bias_c = _const(graph, prod.input(2)) if has_bias else None
                if has_bias and bias_c is None:
                    continue
                if prod.op_type == "Gemm":
                    beta = float(prod.attrs["beta"])
                    if has_bias and (bias_c.size not in (1, channels) or bias_c.ndim > 1 and bias_c.shape[0] != 1):
                        continue
                    old = np.broadcast_to(bias_c.astype(np.float64).reshape(-1) * beta, (channels,)) if has_bias \
                        else np.zeros(channels)
                    scale_w = a[:, None] if prod.attrs["transB"] else a[None, :]
                    new_w = (w.astype(np.float64) * scale_w).astype(w.dtype)
                    prod.attrs["beta"] = 1.0
                else:
                    old = bias_c.astype(np.float64) if has_bias else np.zeros(channels)
                    per_channel = [1] * w.ndim
                    per_channel[1 if prod.op_type == "ConvTranspose" else 0] = -1
                    new_w = (w.astype(np.float64) * a.reshape(per_channel)).astype(w.dtype)
                new_b = (old * a + b).astype(w.dtype)
                prod.inputs[1] = _new_constant(graph, prod.inputs[1], new_w)
                bias_name = _new_constant(graph, prod.input(2) or f"{prod.name}_bias", new_b)
                if len(prod.inputs) < 3:
                    prod.inputs.append(bias_name)
                else:
                    prod.inputs[2] = bias_name
            # the producer now writes the folded node's output
            out = node.outputs[0]
            prod.outputs[prod.outputs.index(x)] = out
            graph.nodes.remove(node)
            graph.tensors.pop(x, None)
            changed += 1
            again = True
            break
    if changed:
        # a Conv -> BatchNormalization -> Mul -> Add chain (Caffe2's Inception) folds three times: drop the
        # intermediate folded weights nothing reads any more (Inception v2 kept 116 MB of them)
        read = {n for node in graph.nodes for n in node.all_inputs}
        for name in [n for n in graph.tensors if "__folded" in n and n not in read]:
            del graph.tensors[name]
    return changed


PASSES: list[tuple[str, Callable[[Graph], int]]] = [
    ("fuse_qdq_elementwise", fuse_qdq_elementwise),
    ("remove_dead_nodes", remove_dead_nodes),
    ("fold_affine_into_conv", fold_affine_into_conv),
    ("fold_pad_into_consumers", fold_pad_into_consumers),
    ("unfold_reshaped_gemm", unfold_reshaped_gemm),
    ("collapse_data_movement", collapse_data_movement),
    ("fold_constant_adds", fold_constant_adds),
    ("split_matmul_batch", split_matmul_batch),
    ("merge_row_projections", merge_row_projections),
]


# passes skipped under a quantized precision. NOTE: fold_constant_adds sums a relative position bias
# (|b| ~ 1) with a mask (0 / -100) into one constant that a quantized Add then quantizes per tensor: the bias
# drowned in steps of 0.4 (a Swin block at int8: output error 0.076 -> 0.112 relative RMS)
# fuse_qdq_elementwise: a quantized precision folds the model's own Q/DQ pairs (qdq.fold_qdq) and lowers itself
# merge_row_projections: one quantized weight for Q, K and V would share one range (per-tensor scales)
FLOAT_ONLY = frozenset({"fold_constant_adds", "fuse_qdq_elementwise", "merge_row_projections"})


def run_passes(graph: Graph, precision: str = "fp32") -> dict[str, int]:
    """Run every pass in order (those of FLOAT_ONLY only for fp32 and fp16); returns pass name -> nodes
    changed (for reports)."""
    quantized = precision not in ("fp32", "fp16")
    return {name: fn(graph) for name, fn in PASSES if not (quantized and name in FLOAT_ONLY)}
