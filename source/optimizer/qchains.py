"""onnxruntime's dynamic quantization chains as one integer product.

``onnxruntime.quantization.quantize_dynamic`` writes each MatMul as::

    DynamicQuantizeLinear(x) -> (xq, xs, xz)
    S = Mul(xs, w_scale)                      (w_scale constant: per tensor or per column)
    Y = Mul(Cast<float>(MatMulInteger(xq, Wq, xz, w_zero)), S)
    [Add(Y, bias)]                            (bias constant [N])

``fuse_integer_chains`` turns MatMulInteger -> Cast -> Mul (-> Add) into one com.microsoft
MatMulIntegerToFloat(xq, Wq, xs, w_scale, xz, w_zero[, bias]): the same float32 operations in the same order
(``float32(sum) * (xs * w_scale) + bias``), which a device runs as one integer GEMM with a dequantizing
epilogue (the cpu device: integer.py). The DynamicQuantizeLinear stays (its per-tensor scale is the model's
definition). Runs with ``fuse_qdq``, before inference and constant folding.
"""
from __future__ import annotations

import numpy as np

from nnhal.graph.graph import Graph
from nnhal.graph.node import Node

FLOAT = 1       # TensorProto.FLOAT


def _only_reader(graph: Graph, readers: dict[str, list[Node]], name: str, op: str) -> Node | None:
    users = readers.get(name, [])
    if len(users) != 1 or name in graph.outputs or users[0].domain or users[0].op_type != op:
        return None
    return users[0]


def _constant(graph: Graph, name: str) -> np.ndarray | None:
    t = graph.tensors.get(name) if name else None
    return t.value if t is not None and t.is_constant and t.value is not None else None


def _other(node: Node, name: str) -> str:
    return node.inputs[1] if node.inputs[0] == name else node.inputs[0]


def _scales(graph: Graph, producers: dict[str, Node], name: str, n: int) -> tuple[str, str] | None:
    """(activation scale, constant weight scale) when ``name`` is Mul(scale, w_scale) of a computed activation
    scale (its type unknown before inference: the fused node's kernel checks it is one float32) and a float32
    constant of 1 or ``n`` values (either order)."""
    mul = producers.get(name)
    if mul is None or mul.domain or mul.op_type != "Mul" or len(mul.inputs) != 2:
        return None
    for x_s, w_s in ((mul.inputs[0], mul.inputs[1]), (mul.inputs[1], mul.inputs[0])):
        w = _constant(graph, w_s)
        xt = graph.tensors.get(x_s)
        if w is not None and w.dtype == np.float32 and w.size in (1, n) and w.ndim <= 1 and xt is not None \
                and _constant(graph, x_s) is None and xt.dtype in (None, np.dtype(np.float32)):
            return x_s, w_s
    return None


def fuse_integer_chains(graph: Graph) -> int:
    """Fuse MatMulInteger -> Cast(float) -> Mul(scales) [-> Add(bias)] into MatMulIntegerToFloat; returns the
    number fused. The scale product's Mul stays (dead code elimination drops it when nothing else reads it)."""
    from nnhal.optimizer.precision import make_node

    producers = graph.producers()
    readers = graph.consumers()
    replaced: dict[str, Node] = {}
    removed: set[str] = set()
    for node in graph.nodes:
        if node.domain or node.op_type != "MatMulInteger" or len(node.inputs) < 3:
            continue
        b = _constant(graph, node.inputs[1])
        if b is None or b.ndim != 2:
            continue
        cast = _only_reader(graph, readers, node.outputs[0], "Cast")
        if cast is None or cast.attrs.get("to") != FLOAT:
            continue
        mul = _only_reader(graph, readers, cast.outputs[0], "Mul")
        if mul is None:
            continue
        scales = _scales(graph, producers, _other(mul, cast.outputs[0]), b.shape[1])
        if scales is None:
            continue
        inputs = [node.inputs[0], node.inputs[1], scales[0], scales[1], node.inputs[2],
                  node.inputs[3] if len(node.inputs) > 3 else ""]
        last = mul
        add = _only_reader(graph, readers, mul.outputs[0], "Add")
        if add is not None:
            bias = _constant(graph, _other(add, mul.outputs[0]))
            if bias is not None and bias.dtype == np.float32 and bias.shape == (b.shape[1],):
                inputs.append(_other(add, mul.outputs[0]))
                last = add
        while inputs and not inputs[-1]:
            inputs.pop()
        replaced[node.name] = make_node(node.name + "::to_float", "MatMulIntegerToFloat", inputs, [last.outputs[0]],
                                        {}, graph.opsets.get("", 17), "com.microsoft")
        removed.update(n.name for n in (cast, mul, add) if n is not None and (n is not add or last is add))
    if not replaced:
        return 0
    graph.opsets.setdefault("com.microsoft", 1)
    graph.nodes = [replaced.get(n.name, n) for n in graph.nodes if n.name not in removed]
    return len(replaced)
