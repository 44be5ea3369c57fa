"""Two constant additions in a row become one, and a reshape of a matrix product that only regroups its
batch dimensions moves onto the product's operands, so the sum lands in the product's epilogue.

Swin's shifted-window attention adds a relative position bias to ``q @ k^T``, views the scores per image
and window to add the shifted-window mask, and views them back for the softmax:

    MatMul -> Add(bias) -> Reshape(B, windows, heads, N, N) -> Add(mask) -> Reshape(B * windows, ...)

``fold_constant_adds`` turns ``Add(Reshape(Add(x, C1)), C2)`` (the Reshape optional) into
``Add(Reshape(x), C)`` with ``C = C1 + C2`` in the reshaped form, computed once at prepare and stored in
its smallest broadcasting shape (a dimension along which every value is equal is kept as 1), and
``split_matmul_batch`` turns ``Reshape(MatMul(a, b))`` that regroups only the batch dimensions into
``MatMul(Reshape(a), Reshape(b))`` (views of the operands): the product then carries the 5-D shape and
the CPU fuses the one remaining Add into its epilogue. Each sum is rounded once in float32 instead of
twice: results stay within fp32 rounding of the original.
"""
from __future__ import annotations

import numpy as np

from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.tensor import Tensor, TensorKind, constant
from nnhal.optimizer.limits import MAX_FOLD_BYTES
from nnhal.optimizer.movement import fresh_name


def _static(graph: Graph, name: str) -> Tensor | None:
    t = graph.tensors.get(name) if name else None
    return t if t is not None and t.static and t.quant is None else None


def _constant_operand(graph: Graph, node: Node) -> tuple[str, np.ndarray] | None:
    """(the other operand, the constant) of a two-input float Add with exactly one constant operand."""
    if node.op_type != "Add" or node.domain or len(node.inputs) != 2 or len(node.outputs) != 1:
        return None
    kinds = [graph.tensors.get(n) for n in node.inputs]
    if any(t is None for t in kinds) or kinds[0].is_constant == kinds[1].is_constant:
        return None
    k = 0 if kinds[0].is_constant else 1
    value = kinds[k].value
    if value is None or value.dtype.kind != "f":
        return None
    return node.inputs[1 - k], value


def _smallest(value: np.ndarray) -> np.ndarray:
    """``value`` with every axis along which all entries are equal reduced to length 1."""
    for axis in range(value.ndim):
        if value.shape[axis] > 1:
            first = value.take([0], axis=axis)
            if np.array_equal(value, np.broadcast_to(first, value.shape)):
                value = first
    return np.ascontiguousarray(value)


def fold_constant_adds(graph: Graph) -> int:
    """``Add(Reshape(Add(x, C1)), C2)`` (or without the Reshape) -> ``Add(Reshape(x), C1 + C2)`` where the
    intermediates have no other reader and the summed constant's full-size form fits MAX_FOLD_BYTES.
    Returns the number of Adds removed."""
    changed = 0
    again = True
    while again:
        again = False
        producers, consumers = graph.producers(), graph.consumers()
        pinned = set(graph.outputs) | set(graph.outer)

        def private(name: str) -> bool:
            return name not in pinned and len(consumers.get(name, [])) == 1

        for node in graph.nodes:
            second = _constant_operand(graph, node)
            if second is None:
                continue
            t, c2 = second
            reshape = producers.get(t)
            if reshape is not None and reshape.op_type == "Reshape" and not reshape.domain and private(t):
                u = reshape.inputs[0]
            else:
                reshape, u = None, t
            first_add = producers.get(u)
            first = _constant_operand(graph, first_add) if first_add is not None else None
            if first is None or not private(u):
                continue
            x, c1 = first
            tu, tt, out = _static(graph, u), _static(graph, t), _static(graph, node.outputs[0])
            if tu is None or tt is None or out is None or out.shape != tt.shape or c1.dtype != tu.dtype \
                    or c2.dtype != tu.dtype or tu.nbytes > MAX_FOLD_BYTES:
                continue
            # NOTE: one float32 addition rounds the exact sum once, as float64 then float32 would
            total = np.broadcast_to(c1, tu.shape).reshape(tt.shape) + c2
            name = fresh_name(graph, f"{node.name}__summed")
            graph.tensors[name] = constant(name, _smallest(total.astype(tu.dtype, copy=False)))
            if reshape is not None:
                reshape.inputs[0] = x
                node.inputs = [t, name]
            else:
                node.inputs = [x, name]
            graph.nodes.remove(first_add)
            graph.tensors.pop(u, None)
            changed += 1
            again = True
            break
    return changed


def _regroup(graph: Graph, name: str, batch: tuple[int, ...], product_batch: tuple, opset: int,
             nodes: list[Node], base: str) -> str | None:
    """The MatMul operand ``name`` viewed with batch dimensions ``batch``: a matrix stays as it is, an
    operand with the product's full batch dimensions gets a Reshape (appended to ``nodes``); else None."""
    from nnhal.optimizer.precision import make_node

    t = _static(graph, name)
    if t is None:
        return None
    if len(t.shape) == 2:
        return name
    if tuple(t.shape[:-2]) != product_batch:
        return None
    shape = fresh_name(graph, f"{base}__shape")
    out = fresh_name(graph, f"{base}__batched")
    graph.tensors[shape] = constant(shape, np.array(batch + tuple(t.shape[-2:]), np.int64))
    graph.tensors[out] = Tensor(out, t.dtype, batch + tuple(t.shape[-2:]), TensorKind.VARIABLE)
    nodes.append(make_node(f"{base}/batched", "Reshape", [name, shape], [out], {}, opset))
    return out


def split_matmul_batch(graph: Graph) -> int:
    """``Reshape(MatMul(a, b))`` whose target keeps the product's last two dimensions and regroups only
    its batch dimensions becomes ``MatMul(Reshape(a), Reshape(b))``, when the product has no other
    reader and each operand is a matrix or has the product's batch dimensions. Returns the number of
    Reshapes moved."""
    opset = graph.opsets.get("", 17)
    changed = 0
    producers, consumers = graph.producers(), graph.consumers()
    pinned = set(graph.outputs) | set(graph.outer)
    for reshape in list(graph.nodes):
        if reshape.op_type != "Reshape" or reshape.domain:
            continue
        u = reshape.inputs[0]
        mm = producers.get(u)
        if mm is None or mm.op_type != "MatMul" or mm.domain or u in pinned or len(consumers.get(u, [])) != 1:
            continue
        tu, tr = _static(graph, u), _static(graph, reshape.outputs[0])
        if tu is None or tr is None or len(tu.shape) < 3 or len(tr.shape) < 3 or tr.shape[-2:] != tu.shape[-2:]:
            continue
        batch = tuple(tr.shape[:-2])
        added: list[Node] = []
        operands = [_regroup(graph, n, batch, tuple(tu.shape[:-2]), opset, added, f"{mm.name}/{k}")
                    for k, n in enumerate(mm.inputs)]
        if any(o is None for o in operands) or not added:
            for node in added:
                for name in node.outputs + node.inputs[1:]:
                    graph.tensors.pop(name, None)
            continue
        at = graph.nodes.index(mm)
        mm.inputs = operands
        mm.outputs = [reshape.outputs[0]]
        graph.nodes[at:at] = added
        graph.nodes.remove(reshape)
        graph.tensors.pop(u, None)
        changed += 1
    return changed
