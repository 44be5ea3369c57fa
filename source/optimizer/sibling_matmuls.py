"""A decoder step's projections of one row into one product (merge_row_projections).

A transformer decoder run one token at a time (a KV-cache step: gpt_kv's ``(1, 1, 256)`` hidden state) projects
the same row by two or more constant matrices, each followed by its constant bias: attention's Q, K and V
(``MatMul(x, Wq) -> Add(bq)``, ``MatMul(x, Wk) -> Add(bk)``, ...). Each is a GEMV whose run is one dispatch of
the device's product and one of its bias, a few microseconds against the reading of a 256 KiB weight.

``merge_row_projections`` makes them one product of the row by the constant ``[Wq | Wk | Wv]`` (concatenated
along the columns once, here), one bias ``[bq | bk | bv]``, and a ``Split`` along the last axis whose outputs
are the former bias outputs. Only for a row (every axis of ``x`` but the last is 1): each part is then a
contiguous block of the product, which a device can hand out as a view; with more rows the parts would be
strided and cost a copy each. The products sum the same terms in the same order per column, so results
are those of the separate products up to the device kernel's column split.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from nnhal.graph.derived import derive
from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.tensor import Tensor, TensorKind, constant
from nnhal.optimizer.movement import fresh_name
from nnhal.optimizer.nodes import make_node

# NOTE: the largest concatenated weight (bytes): a merge makes a second copy of the weights only while the
# originals have other readers, and a decoder's vocabulary head (the one large product of a row) is never a
# sibling of another; this bounds the copy all the same
MAX_MERGED_BYTES = 64 << 20


def _row(t: Tensor | None) -> bool:
    """``t`` is a static float tensor of one row: rank >= 2, every axis but the last of extent 1."""
    return t is not None and t.static and t.dtype.kind == "f" and len(t.shape) >= 2 and t.quant is None \
        and all(d == 1 for d in t.shape[:-1])


def _projection(graph: Graph, node: Node, consumers: dict[str, list[Node]], pinned: set[str]) \
        -> tuple[np.ndarray, Node | None, np.ndarray | None] | None:
    """(weight, bias Add or None, bias) of a MatMul of a row by a constant matrix whose product is read only by
    an Add of a constant vector of the product's width (or, without a bias, by anything: then bias is None)."""
    if node.op_type != "MatMul" or node.domain or len(node.inputs) != 2 or len(node.outputs) != 1:
        return None
    w_t, y = graph.tensors.get(node.inputs[1]), node.outputs[0]
    x_t, y_t = graph.tensors.get(node.inputs[0]), graph.tensors.get(y)
    if w_t is None or not w_t.is_constant or w_t.value is None or w_t.value.ndim != 2 or w_t.quant is not None \
            or not _row(x_t) or w_t.value.dtype != x_t.dtype or y_t is None or y_t.dtype != x_t.dtype \
            or y_t.shape != tuple(x_t.shape[:-1]) + (w_t.value.shape[1],) or y_t.quant is not None:
        return None
    readers = consumers.get(y, [])
    if len(readers) == 1 and y not in pinned:
        add = readers[0]
        if add.op_type == "Add" and not add.domain and len(add.inputs) == 2 and add.inputs.count(y) == 1 \
                and len(add.outputs) == 1:
            b_t = graph.tensors.get(add.inputs[1] if add.inputs[0] == y else add.inputs[0])
            o_t = graph.tensors.get(add.outputs[0])
            b = b_t.value if b_t is not None and b_t.is_constant and b_t.quant is None else None
            if b is not None and b.dtype == x_t.dtype and b.shape[-1:] == (w_t.value.shape[1],) \
                    and b.size == w_t.value.shape[1] and b.ndim <= len(y_t.shape) and o_t is not None \
                    and o_t.shape == y_t.shape and o_t.dtype == y_t.dtype and o_t.quant is None:
                return w_t.value, add, b.reshape(-1)
    return w_t.value, None, None


def merge_row_projections(graph: Graph) -> int:
    """Merge the MatMuls of one row by constant matrices (with a constant bias Add each, or none) into one
    MatMul, one Add and a Split (see the module docstring). Products that are graph outputs keep their own
    node. Returns the number of MatMuls merged away."""
    opset = graph.opsets.get("", 17)
    consumers = graph.consumers()
    pinned = set(graph.outputs) | set(graph.outer)
    changed = 0
    for x in [name for name in consumers if _row(graph.tensors.get(name))]:
        groups: dict[tuple, list[tuple[Node, np.ndarray, Node | None, np.ndarray | None]]] = {}
        for node in consumers[x]:
            if node.op_type != "MatMul" or node.inputs[0] != x or node.outputs[0] in pinned:
                continue
            found = _projection(graph, node, consumers, pinned)
            if found is not None:
                w, add, b = found
                groups.setdefault((w.shape[0], add is not None), []).append((node, w, add, b))
        for members in groups.values():
            if len(members) < 2 or sum(w.nbytes for _, w, _, _ in members) > MAX_MERGED_BYTES:
                continue
            _merge(graph, x, members, opset)
            changed += len(members) - 1
    return changed


def _merge(graph: Graph, x: str, members: list, opset: int) -> None:
    """Replace ``members`` (MatMul, weight, bias Add or None, bias) of the row ``x`` by one MatMul [+ Add] and a
    Split writing their outputs, placed where the first of them was."""
    # NOTE: by identity: list.index compares nodes with the dataclass __eq__ field by field (~2 ms a merge)
    ids = {id(node) for node, _, _, _ in members}
    first = next(i for i, n in enumerate(graph.nodes) if id(n) in ids)
    base = members[0][0].name
    x_t = graph.tensors[x]
    widths = [w.shape[1] for _, w, _, _ in members]
    shape = tuple(x_t.shape[:-1]) + (sum(widths),)
    w_name = fresh_name(graph, f"{base}__merged_weight")
    weights = tuple(w for _, w, _, _ in members)
    # NOTE: the same weights merge to the same array in every prepared input shape (nnhal.graph.derived): a
    # re-prepare neither concatenates again nor misses the packed GEMM derived from the merged weight
    graph.tensors[w_name] = constant(w_name, derive("merged_weight", weights, None,
                                                    partial(np.concatenate, weights, axis=1)))
    product = fresh_name(graph, f"{base}__merged")
    graph.tensors[product] = Tensor(product, x_t.dtype, shape, TensorKind.VARIABLE)
    new = [make_node(f"{base}/merged", "MatMul", [x, w_name], [product], {}, opset)]
    with_bias = members[0][2] is not None
    if with_bias:
        b_name = fresh_name(graph, f"{base}__merged_bias")
        biases = tuple(b for _, _, _, b in members)
        graph.tensors[b_name] = constant(b_name, derive("merged_bias", biases, None, partial(np.concatenate, biases)))
        biased = fresh_name(graph, f"{base}__merged_biased")
        graph.tensors[biased] = Tensor(biased, x_t.dtype, shape, TensorKind.VARIABLE)
        new.append(make_node(f"{base}/merged_bias", "Add", [product, b_name], [biased], {}, opset))
        product = biased
    outputs = [(add if with_bias else node).outputs[0] for node, _, add, _ in members]
    axis = len(shape) - 1
    if opset >= 13:
        sizes = fresh_name(graph, f"{base}__merged_sizes")
        graph.tensors[sizes] = constant(sizes, np.array(widths, np.int64))
        split = make_node(f"{base}/merged_split", "Split", [product, sizes], outputs, {"axis": axis}, opset)
    else:
        split = make_node(f"{base}/merged_split", "Split", [product], outputs, {"axis": axis, "split": widths}, opset)
    new.append(split)
    gone = {id(node) for node, _, _, _ in members} | {id(add) for _, _, add, _ in members if add is not None}
    graph.nodes[first:first] = new
    graph.nodes = [n for n in graph.nodes if id(n) not in gone]
    # the products (now inside the merged one) and the separate weights and biases nothing else reads
    read = {n for node in graph.nodes for n in node.all_inputs}
    for node, _, add, _ in members:
        for name in ([node.outputs[0]] if with_bias else []) + node.inputs[1:] + (add.inputs if add else []):
            t = graph.tensors.get(name)
            if t is not None and name not in read and name not in graph.outputs and name not in graph.inputs \
                    and (t.is_constant or name == node.outputs[0]):
                del graph.tensors[name]
