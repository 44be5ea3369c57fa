"""QDQ models (QuantizeLinear / DequantizeLinear around float ops), as quantization tools write them.

Runs before inference and constant folding (which would turn the weights'
DequantizeLinear into float constants).

``fuse_qdq`` turns DequantizeLinear -> Conv / MatMul -> QuantizeLinear into
QLinearConv / QLinearMatMul so the integer kernels run them exactly, the way
onnxruntime executes such models (and quantize_dynamic's MatMulInteger chains
into MatMulIntegerToFloat, qchains.py); the rest of the graph keeps its explicit
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
    """Fuse DQ -> Conv/MatMul -> Q into QLinearConv/QLinearMatMul, and onnxruntime's dynamic quantization
    chains into MatMulIntegerToFloat (qchains.py); returns the number fused."""
    from nnhal.optimizer.qchains import fuse_integer_chains

    return _fuse_qlinear(graph) + _fuse_float_output(graph) + fuse_integer_chains(graph)


def _fuse_float_output(graph: Graph) -> int:
    """DQ(x) -> MatMul(., DQ(constant W)) with a float output (no QuantizeLinear after it: before a Softmax,
    a LayerNormalization or a float Add) as com.microsoft MatMulIntegerToFloat: the exact integer sum times
    x_scale * w_scale (per tensor or per column); the number fused."""
    from nnhal.optimizer.precision import make_node

    producers = graph.producers()
    replaced: dict[str, Node] = {}
    eight_bit = (np.dtype(np.uint8), np.dtype(np.int8))
    for node in graph.nodes:
        if node.domain or node.op_type != "MatMul":
            continue
        dqx, dqw = producers.get(node.inputs[0]), producers.get(node.inputs[1])
        if not (dqx and dqw) or dqx.op_type != "DequantizeLinear" or dqw.op_type != "DequantizeLinear" \
                or dqx.domain or dqw.domain or not _per_tensor(graph, dqx) or dqx.attrs.get("block_size", 0) \
                or dqw.attrs.get("block_size", 0):
            continue
        w = graph.tensors[dqw.inputs[0]]
        x_z = dqx.inputs[2] if len(dqx.inputs) > 2 else ""
        w_z = dqw.inputs[2] if len(dqw.inputs) > 2 else ""
        scale = graph.tensors[dqw.inputs[1]]
        if not w.is_constant or w.value.ndim != 2 or w.value.dtype not in eight_bit or not scale.is_constant \
                or scale.value.dtype != np.float32 or graph.tensors[dqx.inputs[1]].value.dtype != np.float32:
            continue
        n = w.value.shape[1]
        per_column = scale.value.size == n and dqw.attrs.get("axis", 1) in (1, -1)
        if scale.value.size != 1 and not per_column:
            continue
        if w_z and (not graph.tensors[w_z].is_constant or graph.tensors[w_z].value.size not in (1, n)):
            continue
        if not x_z or graph.tensors[x_z].value.dtype not in eight_bit:
            continue
        replaced[node.name] = make_node(node.name + "::to_float", "MatMulIntegerToFloat",
                                        [dqx.inputs[0], dqw.inputs[0], dqx.inputs[1], dqw.inputs[1], x_z, w_z],
                                        [node.outputs[0]], {}, graph.opsets.get("", 17), "com.microsoft")
    if replaced:
        graph.opsets.setdefault("com.microsoft", 1)
        graph.nodes = [replaced.get(n.name, n) for n in graph.nodes]
    return len(replaced)


def _fuse_qlinear(graph: Graph) -> int:
    """DQ -> Conv/MatMul -> Q as QLinearConv/QLinearMatMul; the number fused."""
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
            if graph.tensors[w_s].value.size not in (1, wq.value.shape[0]) \
                    or dqw.attrs.get("axis", 1) not in (0, -wq.value.ndim) \
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
            scales, w = graph.tensors[w_s].value, wq.value
            per_column = w.ndim == 2 and scales.size == w.shape[1] and dqw.attrs.get("axis", 1) in (1, -1) \
                and graph.tensors[w_z].value.size in (1, w.shape[1])
            if scales.size != 1 and not per_column:        # QLinearMatMul takes per-column b scales
                continue
            fused = make_node(node.name + "::qlinear", "QLinearMatMul",
                              [dqx.inputs[0], x_s, x_z, dqw.inputs[0], w_s, w_z, y_s, y_z], [q.outputs[0]], {}, opset)
        replaced[node.name] = fused
        removed.add(q.name)
    if not replaced:
        return 0
    graph.nodes = [replaced.get(n.name, n) for n in graph.nodes if n.name not in removed]
    return len(replaced)


def fold_qdq(graph: Graph) -> int:
    """For quantized precisions: turn each QuantizeLinear -> DequantizeLinear pair into a Clip to the
    pair's range whose output carries the pair's parameters (Tensor.quant), so a device quantizes
    with the model's own parameters; returns the number of pairs folded. Weights' DequantizeLinear nodes
    stay and fold into float constants (the device re-quantizes them per channel)."""
    from nnhal.graph.tensor import Quantization, Tensor, constant
    from nnhal.optimizer.precision import make_node

    readers = graph.consumers()
    alias: dict[str, str] = {}
    removed: set[str] = set()
    clips: dict[str, Node] = {}
    for q in graph.nodes:
        if q.domain or q.op_type != "QuantizeLinear" or q.outputs[0] in graph.outputs or not _per_tensor(graph, q):
            continue
        if len(q.inputs) < 3 or not q.inputs[2]:
            continue
        dqs = readers.get(q.outputs[0], [])
        if not dqs or any(d.op_type != "DequantizeLinear" or d.inputs[1:3] != q.inputs[1:3]
                          or d.outputs[0] in graph.outputs for d in dqs):
            continue
        scale = graph.tensors[q.inputs[1]].value.reshape(())
        zero = graph.tensors[q.inputs[2]].value.reshape(())
        if zero.dtype != np.dtype(np.uint8):
            continue
        # the pair saturates to its range (a Relu folded into zero point 0, for example): keep that as a Clip
        lo = np.float32((0 - int(zero)) * float(scale))
        hi = np.float32((255 - int(zero)) * float(scale))
        clipped = f"{q.outputs[0]}::clipped"
        graph.tensors[clipped] = Tensor(clipped, quant=Quantization(scale.astype(np.float32), zero))
        for bound, value in (("lo", lo), ("hi", hi)):
            graph.tensors[f"{clipped}::{bound}"] = constant(f"{clipped}::{bound}", np.array(value, np.float32))
        clips[q.name] = make_node(q.name + "::saturate", "Clip", [q.inputs[0], f"{clipped}::lo", f"{clipped}::hi"],
                                  [clipped], {}, graph.opsets.get("", 17))
        for d in dqs:
            removed.add(d.name)
            alias[d.outputs[0]] = clipped
    if not clips:
        return 0
    kept = [clips.get(n.name, n) for n in graph.nodes if n.name not in removed]
    for n in kept:
        n.inputs = [alias.get(i, i) for i in n.inputs]
        n.implicit_inputs = [alias.get(i, i) for i in n.implicit_inputs]
    graph.nodes = kept
    return len(clips)


def _dq_source(graph: Graph, producers: dict[str, Node], name: str) -> tuple[str, str, str] | None:
    """(8-bit tensor, scale, zero point) when ``name`` is a per-tensor DequantizeLinear's output with constant
    parameters and a zero point."""
    dq = producers.get(name)
    if dq is None or dq.domain or dq.op_type != "DequantizeLinear" or len(dq.inputs) < 3 or not dq.inputs[2] \
            or not _per_tensor(graph, dq) or dq.attrs.get("block_size", 0):
        return None
    return dq.inputs[0], dq.inputs[1], dq.inputs[2]


# ops that only move or relabel elements: between a DequantizeLinear and a QuantizeLinear of the same parameters
# they run on the 8-bit codes themselves (quantize(dequantize(c)) == c for every code: the float32 round trip
# (c - z) * s / s is within an ulp of c - z, and rounds back to it), as onnxruntime's QDQ optimizer drops the pair
MOVEMENT = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity"}


def _same_value(graph: Graph, a: str, b: str) -> bool:
    """Two constant inputs of the same dtype and value (or the same tensor)."""
    if a == b:
        return True
    ta, tb = graph.tensors.get(a), graph.tensors.get(b)
    return ta is not None and tb is not None and ta.is_constant and tb.is_constant and ta.value is not None \
        and tb.value is not None and ta.value.dtype == tb.value.dtype and np.array_equal(ta.value, tb.value)


def drop_qdq_around_movement(graph: Graph) -> int:
    """DQ(x) -> Reshape / Transpose / ... -> Q with the DequantizeLinear's own per-tensor scale and zero point
    becomes the movement op on x itself (MOVEMENT): the same codes, two float32 passes and a four times larger
    move fewer; the number rewritten. The DequantizeLinear stays while something else reads it."""
    producers = graph.producers()
    readers = graph.consumers()
    alias: dict[str, str] = {}          # the movement op's old float output -> the Q's 8-bit output
    removed: set[str] = set()
    for q in graph.nodes:
        if q.domain or q.op_type != "QuantizeLinear" or not _per_tensor(graph, q) or len(q.inputs) < 3 \
                or not q.inputs[2] or q.attrs.get("block_size", 0):
            continue
        move = producers.get(q.inputs[0])
        if move is None or move.domain or move.op_type not in MOVEMENT or move.name in removed \
                or _single_reader(graph, readers, move.outputs[0]) is not q:
            continue
        source = _dq_source(graph, producers, move.inputs[0])
        if source is None or not (_same_value(graph, source[1], q.inputs[1])
                                  and _same_value(graph, source[2], q.inputs[2])):
            continue
        move.inputs = [source[0], *move.inputs[1:]]
        alias[move.outputs[0]] = q.outputs[0]
        move.outputs = [q.outputs[0]]
        removed.add(q.name)
    if not removed:
        return 0
    graph.nodes = [n for n in graph.nodes if n.name not in removed]
    for name in alias:
        graph.tensors.pop(name, None)
    return len(removed)


def fuse_qdq_elementwise(graph: Graph) -> int:
    """Static QDQ models after inference: DQ(a), DQ(b) -> Add / Mul -> Q becomes com.microsoft QLinearAdd /
    QLinearMul (the same float32 arithmetic: bit-equal), then every element-wise chain between 8-bit tensors
    becomes a lookup table (qtables.py: DQ -> Relu -> Q, a SiLU's DQ -> Sigmoid -> Q -> DQ -> Mul -> Q, the
    new QLinearAdd -> DQ -> Relu -> Q); returns the number of nodes fused. First the Q/DQ pairs around
    movement ops go (drop_qdq_around_movement). A DequantizeLinear left unread goes with the dead nodes
    (passes.PASSES runs this pass before remove_dead_nodes)."""
    from nnhal.optimizer.precision import make_node
    from nnhal.optimizer.qtables import fuse_code_tables

    moved = drop_qdq_around_movement(graph)
    producers = graph.producers()
    readers = graph.consumers()
    replaced: dict[str, Node] = {}
    removed: set[str] = set()
    for node in graph.nodes:
        if node.domain or node.op_type not in ("Add", "Mul") or len(node.inputs) != 2:
            continue
        a, b = (_dq_source(graph, producers, i) for i in node.inputs)
        q = _single_reader(graph, readers, node.outputs[0])
        if a is None or b is None or q is None or q.op_type != "QuantizeLinear" or len(q.inputs) < 3 \
                or not q.inputs[2] or not _per_tensor(graph, q):
            continue
        dtypes = {graph.tensors[a[0]].dtype, graph.tensors[b[0]].dtype, graph.tensors[q.inputs[2]].dtype}
        if len(dtypes) != 1 or dtypes.pop() not in (np.dtype(np.uint8), np.dtype(np.int8)):
            continue
        replaced[node.name] = make_node(node.name + "::qlinear", "QLinear" + node.op_type,
                                        [*a, *b, q.inputs[1], q.inputs[2]], [q.outputs[0]], {},
                                        graph.opsets.get("", 17), "com.microsoft")
        removed.add(q.name)
    if replaced:
        graph.opsets.setdefault("com.microsoft", 1)
        graph.nodes = [replaced.get(n.name, n) for n in graph.nodes if n.name not in removed]
    return moved + len(replaced) + fuse_code_tables(graph)
