"""QDQ models (QuantizeLinear / DequantizeLinear around float ops), as quantization tools write them.

Runs before inference and constant folding (which would turn the weights'
DequantizeLinear into float constants).

``fuse_qdq`` turns DequantizeLinear -> Conv / MatMul -> QuantizeLinear into
QLinearConv / QLinearMatMul so the integer kernels run them exactly, the way
onnxruntime executes such models; the rest of the graph keeps its explicit
Q/DQ nodes (DequantizeLinear -> MaxPool -> QuantizeLinear with equal
parameters is exact in float anyway).
"""
from __future__ import annotations

import numpy as np

from nnhal.graph.graph import Graph
from nnhal.graph.node import Node


def _single_reader(graph: Graph, readers: dict[str, list[Node]], name: str) -> Node | None:
    users = readers.get(name, [])
    return users[0] if len(users) == 1 and name not in graph.outputs else None


def _per_tensor(graph: Graph, node: Node) -> bool:
    return all(not n or n in graph.tensors and graph.tensors[n].is_constant and graph.tensors[n].value.size == 1
               for n in node.inputs[1:3])


def fuse_qdq(graph: Graph) -> int:
    """Fuse DQ -> Conv/MatMul -> Q into QLinearConv/QLinearMatMul; returns the number fused."""
    from nnhal.optimizer.precision import make_node

    producers = graph.producers()
    readers = graph.consumers()
    replaced: dict[str, Node] = {}
    removed: set[str] = set()
    for node in graph.nodes:
        if node.domain or node.op_type not in ("Conv", "MatMul") or node.name in removed:
            continue
        dqx = producers.get(node.inputs[0])
        dqw = producers.get(node.inputs[1])
        q = _single_reader(graph, readers, node.outputs[0])
        if not (dqx and dqw and q) or dqx.op_type != "DequantizeLinear" or dqw.op_type != "DequantizeLinear" \
                or q.op_type != "QuantizeLinear" or not _per_tensor(graph, dqx) or not _per_tensor(graph, q):
            continue
        wq = graph.tensors[dqw.inputs[0]]
        if not wq.is_constant or dqw.attrs.get("block_size", 0):
            continue
        x_s, x_z = dqx.inputs[1], dqx.inputs[2] if len(dqx.inputs) > 2 else ""
        w_s, w_z = dqw.inputs[1], dqw.inputs[2] if len(dqw.inputs) > 2 else ""
        y_s, y_z = q.inputs[1], q.inputs[2] if len(q.inputs) > 2 else ""
        if not (x_z and w_z and y_z) or not all(graph.tensors[z].is_constant for z in (x_z, w_z, y_z)):
            continue
        eight_bit = (np.dtype(np.uint8), np.dtype(np.int8))
        if graph.tensors[x_z].value.dtype not in eight_bit or wq.value.dtype not in eight_bit:
            continue
        opset = graph.opsets.get("", 17)
        if node.op_type == "Conv":
            if graph.tensors[w_s].value.size not in (1, wq.value.shape[0]) or dqw.attrs.get("axis", 1) not in (0, -wq.value.ndim) \
                    and graph.tensors[w_s].value.size != 1:
                continue
            inputs = [dqx.inputs[0], x_s, x_z, dqw.inputs[0], w_s, w_z, y_s, y_z]
            if node.has_input(2):
                dqb = producers.get(node.inputs[2])
                if dqb is None or dqb.op_type != "DequantizeLinear" or not graph.tensors[dqb.inputs[0]].is_constant \
                        or graph.tensors[dqb.inputs[0]].dtype != np.dtype(np.int32):
                    continue
                inputs.append(dqb.inputs[0])
            attrs = {k: v for k, v in node.attrs.items() if v is not None}
            fused = make_node(node.name + "::qlinear", "QLinearConv", inputs, [q.outputs[0]], attrs, opset)
        else:
            if graph.tensors[w_s].value.size != 1:
                continue
            fused = make_node(node.name + "::qlinear", "QLinearMatMul",
                              [dqx.inputs[0], x_s, x_z, dqw.inputs[0], w_s, w_z, y_s, y_z], [q.outputs[0]], {}, opset)
        replaced[node.name] = fused
        removed.add(q.name)
    if not replaced:
        return 0
    graph.nodes = [replaced.get(n.name, n) for n in graph.nodes if n.name not in removed]
    return len(replaced)
