"""int8 / uint8 for OpenVINO: the subgraph in QDQ form, from the scales nnhal calibrated.

OpenVINO's low-precision transformations run a convolution or a matrix product in integers when its
inputs come through DequantizeLinear: the activation through QuantizeLinear -> DequantizeLinear with the
per-tensor parameters the core set (``Tensor.quant``: uint8 asymmetric or int8 symmetric), the constant
weight as int8 symmetric values (per output channel from opset 13, per tensor below) through a
DequantizeLinear. Everything else stays float32; nodes the user or the core keeps in float
(``keep_fp32``, ``higher``) are left alone. The token products the core marks dynamic get int8 weights
only: OpenVINO quantizes their activations per token at run time (DYNAMIC_QUANTIZATION_GROUP_SIZE). The
subgraph gets a graph of its own (the shared one is untouched); its boundaries stay float32, so the core
converts nothing.

Where OpenVINO's integer kernels sum u8 x s8 pairs in 16 bits (x86 CPUs without VNNI run ``vpmaddubsw``, which
saturates: 255 * 127 * 2 > 32767), full 8-bit weights give wrong products; runtime.weight_levels() asks the
CPU plugin once, and the weights then keep 7 bits (|q| <= 63, NNCF's "overflow fix"). The subgraph's stats
say which (``openvino_weight_levels``).
"""
from __future__ import annotations

import numpy as np

from nnhal.device.openvino import runtime
from nnhal.graph.node import Node
from nnhal.graph.subgraph import Subgraph
from nnhal.graph.tensor import Tensor, TensorKind
from nnhal.optimizer.precision import subgraph_graph
from nnhal.optimizer.quantize import per_channel_int8

F32 = np.dtype(np.float32)
PER_CHANNEL_OPSET = 13      # DequantizeLinear's axis attribute


def _weight_axis(node: Node) -> int | None:
    """The output-channel axis of a product's constant weight (input 1), None when it has none."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "Gemm":
        return 0 if node.attrs.get("transB", 0) else 1
    return 1        # MatMul: [K, N]


def to_qdq(sg: Subgraph, precision: str) -> Subgraph:
    """Rewrite ``sg``'s Conv, Gemm and MatMul nodes to read quantized activations and int8 weights."""
    g = subgraph_graph(sg)
    opset = g.opsets.get("", 13)
    nodes: list[Node] = []
    twins: dict[str, str] = {}
    keep = sg.keep_fp32 | sg.higher
    levels = runtime.weight_levels()

    def const(name: str, value: np.ndarray) -> str:
        value = np.asarray(value)
        g.tensors[name] = Tensor(name, value.dtype, tuple(value.shape), TensorKind.CONSTANT, value)
        return name

    def activation(name: str) -> str:
        if name not in twins:
            q = g.tensors[name].quant
            scale = const(f"{name}::scale", np.asarray(q.scale, np.float32).reshape(()))
            zero = const(f"{name}::zero", np.asarray(q.zero_point).reshape(()))
            qname, twins[name] = f"{name}::q", f"{name}::dq"
            g.tensors[qname] = Tensor(qname, np.asarray(q.zero_point).dtype, g.tensors[name].shape)
            g.tensors[twins[name]] = Tensor(twins[name], F32, g.tensors[name].shape)
            nodes.append(Node(f"{name}::quantize", "QuantizeLinear", [name, scale, zero], [qname], {}, "", opset,
                              opset))
            nodes.append(Node(f"{name}::dequantize", "DequantizeLinear", [qname, scale, zero], [twins[name]], {},
                              "", opset, opset))
        return twins[name]

    def weight(node: Node, name: str) -> str:
        w = g.tensors[name].value.astype(np.float32)
        axis = _weight_axis(node)
        per_channel = opset >= PER_CHANNEL_OPSET and w.ndim >= 2
        if per_channel:
            moved = np.moveaxis(w, axis, 0)
            wq, scales = per_channel_int8(moved, levels)
            wq, zero = np.moveaxis(wq, 0, axis), np.zeros(len(scales), np.int8)
            attrs = {"axis": axis}
        else:
            peak = float(np.abs(w).max()) or 1.0
            scales = np.float32(peak / levels)
            wq, zero, attrs = np.clip(np.rint(w / scales), -levels, levels).astype(np.int8), np.int8(0), {}
        base = f"{node.name}::{name}"
        out = f"{base}::dq"
        g.tensors[out] = Tensor(out, F32, tuple(w.shape))
        nodes.append(Node(f"{base}::dequantize", "DequantizeLinear",
                          [const(f"{base}::int8", wq), const(f"{base}::scale", np.asarray(scales, np.float32)),
                           const(f"{base}::zero", zero)], [out], attrs, "", opset, opset))
        return out

    def quantizable(name: str) -> bool:
        t = g.tensors.get(name)
        return t is not None and t.dtype == F32 and t.quant is not None and not t.is_constant

    dynamic = 0
    for node in g.nodes:
        if node.op_type in ("Conv", "Gemm", "MatMul") and not node.domain and node.name not in keep:
            x, w = node.inputs[0], node.inputs[1]
            wt = g.tensors[w]
            constant = wt.is_constant and wt.dtype == F32 and (node.op_type != "MatMul" or wt.value.ndim == 2)
            if constant and node.name in sg.dynamic:
                # a token product: int8 weights, the activation quantized per token by OpenVINO at run time
                node.inputs[1] = weight(node, w)
                dynamic += 1
            elif quantizable(x) and constant:
                node.inputs[0] = activation(x)
                node.inputs[1] = weight(node, w)
            elif node.op_type == "MatMul" and quantizable(x) and quantizable(w):
                node.inputs[0], node.inputs[1] = activation(x), activation(w)
        nodes.append(node)
    g.nodes = nodes
    sg.graph, sg.nodes = g, nodes
    sg.stats["openvino_qdq"] = len(twins)
    sg.stats["openvino_dynamic"] = dynamic
    sg.stats["openvino_weight_levels"] = levels
    return sg
