"""Element-wise chains between 8-bit tensors as one lookup table (ai.nnhal CodeTable).

A quantized model's activations often go through a chain of element-wise ops that reads one 8-bit tensor and
constants only and writes an 8-bit tensor: the int8 precision pass lowers a SiLU ``x * sigmoid(x)`` after a
quantized convolution to DequantizeLinear -> Sigmoid -> QuantizeLinear -> QLinearMul(x, .). Such a chain has
at most 256 different inputs, so ``fuse_code_tables`` evaluates it once on every code of x (with the host
kernels, the numpy reference of each op) and puts one CodeTable(x, table) in its place: one gather a run
where the chain made four passes, two of them in float32. The table is the chain's reference result on each
code, so the fused graph computes what the chain's reference computes, element for element.

A chain qualifies when every node is element-wise (ELEMENTWISE) with its other inputs constant single values,
every tensor inside it is read only inside it (not a graph output), and it ends in an 8-bit tensor of x's
shape. An Add / Sub / Mul / Div may also take a constant along x's last axis (C values: a static QDQ model's
bias Add between DequantizeLinear and QuantizeLinear, whose quantized bias constant folding made a float
vector): the chain then has 256 inputs per channel and becomes a CodeTable with a [C, 256] table. When that
chain is exactly DequantizeLinear -> Add(bias) -> QuantizeLinear with single-value scales and zero points and
the output type of x, the CodeTable also carries them (attribute ``affine``: x_scale, x_zero, y_scale, y_zero,
then the C bias values), so that a device may compute the chain instead of gathering from the [C, 256] table
(the cpu device does where its computation reproduces the table on every entry).
A device calls it on its own quantized subgraph (the cpu device: after optimizer/precision.py).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.tensor import Tensor, constant

EIGHT_BIT = (np.dtype(np.uint8), np.dtype(np.int8))
CHANNEL_OPS = {("", op) for op in ("Add", "Sub", "Mul", "Div")}
MAX_CHANNELS = 8192         # a per-channel table is C x 256 entries
# element-wise ops whose output element depends on the same input element only (other inputs: single values)
ELEMENTWISE = {("", op) for op in ("DequantizeLinear", "QuantizeLinear", "Sigmoid", "Tanh", "Relu", "LeakyRelu",
                                   "HardSigmoid", "HardSwish", "Clip", "Exp", "Neg", "Abs", "Erf", "Softplus",
                                   "Elu", "Selu", "Mul", "Add", "Sub", "Div", "Gelu", "Mish")} \
    | {("com.microsoft", "QLinearMul"), ("com.microsoft", "QLinearAdd")}


def _scalar_constant(graph: Graph, name: str) -> bool:
    t = graph.tensors.get(name)
    return t is not None and t.is_constant and t.value is not None and t.value.size == 1


def _channel_constant(graph: Graph, name: str, channels: int | None) -> bool:
    """A constant of ``channels`` values along the last axis (shape [..., 1, C]), for a per-channel table."""
    t = graph.tensors.get(name)
    if channels is None or t is None or not t.is_constant or t.value is None or t.value.ndim == 0:
        return False
    return t.value.shape[-1] == channels and t.value.size == channels


def _elementwise(graph: Graph, node: Node) -> bool:
    if (node.domain, node.op_type) not in ELEMENTWISE or len([o for o in node.outputs if o]) != 1:
        return False
    if node.op_type in ("QuantizeLinear", "DequantizeLinear") and node.attrs.get("block_size", 0):
        return False
    return not node.implicit_inputs


def _channels(graph: Graph, x: str) -> int | None:
    """x's last dimension when a per-channel table may be made for it (static, 2 to MAX_CHANNELS), else None."""
    t = graph.tensors.get(x)
    last = t.shape[-1] if t is not None and t.shape else None
    return last if isinstance(last, int) and 1 < last <= MAX_CHANNELS else None


def _region(graph: Graph, x: str, readers: dict[str, list[Node]]) -> list[Node]:
    """The element-wise nodes computed from ``x`` and single-value constants (or, for CHANNEL_OPS, constants
    along x's last axis) only, in graph order."""
    inside: set[str] = {x}
    nodes: list[Node] = []
    position = {n.name: i for i, n in enumerate(graph.nodes)}
    frontier = list(readers.get(x, []))
    seen: set[str] = set()
    channels = _channels(graph, x)
    while frontier:
        frontier.sort(key=lambda n: position[n.name])
        node = frontier.pop(0)
        if node.name in seen:
            continue
        per_channel = (node.domain, node.op_type) in CHANNEL_OPS
        if not _elementwise(graph, node) or not all(
                not i or i in inside or _scalar_constant(graph, i)
                or per_channel and _channel_constant(graph, i, channels) for i in node.inputs):
            continue
        if not any(i in inside for i in node.inputs if i):
            continue
        seen.add(node.name)
        nodes.append(node)
        inside.update(o for o in node.outputs if o)
        for o in node.outputs:
            frontier.extend(r for r in readers.get(o, []) if r.name not in seen)
    return sorted(nodes, key=lambda n: position[n.name])


def _chain_to(graph: Graph, region: list[Node], y: str, x: str, readers: dict[str, list[Node]]) -> list[Node] | None:
    """The region's nodes ``y`` depends on, when every tensor they make but ``y`` is read only by them."""
    by_output = {o: n for n in region for o in n.outputs if o}
    chain: dict[str, Node] = {}
    stack = [y]
    while stack:
        node = by_output.get(stack.pop())
        if node is None or node.name in chain:
            continue
        chain[node.name] = node
        stack.extend(i for i in node.inputs if i and i != x)
    for node in chain.values():
        for o in node.outputs:
            if o and o != y and (o in graph.outputs or any(r.name not in chain for r in readers.get(o, []))):
                return None
    return [n for n in region if n.name in chain]


def _evaluate(graph: Graph, chain: list[Node], x: str, y: str) -> np.ndarray:
    """The chain's output for every code of ``x`` (its host kernels on a [256] input), or, when a node takes a
    constant along x's last axis (C values), for every code and channel ([C, 256]: the input [256, C])."""
    from nnhal.hostkernels.graphrun import interpret
    from nnhal.optimizer.infer import infer_graph

    dtype = graph.tensors[x].dtype
    names = {n for node in chain for n in node.inputs + node.outputs if n}
    tensors = {n: replace(graph.tensors[n]) if graph.tensors[n].is_constant else Tensor(n) for n in names}
    channels = _channels(graph, x)
    per_channel = channels is not None and any(tensors[i].is_constant and tensors[i].value.size > 1
                                               for n in chain for i in n.inputs if i and i != x)
    codes = np.arange(256, dtype=np.uint8).view(dtype)
    if per_channel:
        codes = np.ascontiguousarray(np.repeat(codes[:, None], channels, 1))
    tensors[x] = Tensor(x, dtype, codes.shape)
    nodes = [replace(n, inputs=list(n.inputs), outputs=list(n.outputs), attrs=dict(n.attrs)) for n in chain]
    small = Graph(f"{graph.name}::table", tensors, nodes, [x], [y], dict(graph.opsets), None)
    infer_graph(small, fold=False, check_types=False)
    values = {x: codes}
    interpret(small, small.nodes, [x], [y]).run(values)
    if per_channel:
        return np.ascontiguousarray(values[y].reshape(256, channels).T)
    return np.ascontiguousarray(values[y])


def _scalar(graph: Graph, node: Node, index: int, absent: float) -> float | None:
    """The single value of ``node``'s input ``index`` (``absent`` when the optional input is not given)."""
    name = node.inputs[index] if index < len(node.inputs) else ""
    if not name:
        return absent
    return float(np.asarray(graph.tensors[name].value).reshape(-1)[0]) if _scalar_constant(graph, name) else None


def _affine(graph: Graph, chain: list[Node], x: str, y: str) -> list[float]:
    """[x_scale, x_zero, y_scale, y_zero, bias...] when ``chain`` is DequantizeLinear(x) -> Add(., bias along
    x's last axis) -> QuantizeLinear to y of x's type, all with single-value parameters; else []."""
    if [n.op_type for n in chain] != ["DequantizeLinear", "Add", "QuantizeLinear"] \
            or any(n.domain != "" for n in chain) or graph.tensors[y].dtype != graph.tensors[x].dtype:
        return []
    dq, add, q = chain
    if dq.inputs[0] != x or q.inputs[0] != add.outputs[0] or dq.outputs[0] not in add.inputs \
            or q.attrs.get("saturate", 1) != 1 or q.attrs.get("output_dtype", 0):
        return []
    others = [i for i in add.inputs if i != dq.outputs[0]]
    bias = graph.tensors.get(others[0]) if len(others) == 1 else None
    if bias is None or not _channel_constant(graph, others[0], _channels(graph, x)) \
            or bias.value.dtype != np.float32:
        return []
    params = [_scalar(graph, dq, 1, 1.0), _scalar(graph, dq, 2, 0.0), _scalar(graph, q, 1, 1.0),
              _scalar(graph, q, 2, 0.0)]
    if any(v is None for v in params) or len(dq.inputs) < 2 or len(q.inputs) < 2:
        return []
    return params + [float(v) for v in bias.value.reshape(-1)]


def fuse_code_tables(graph: Graph) -> int:
    """Replace each qualifying chain (see the module doc) by a CodeTable node; the number replaced."""
    from nnhal.optimizer.nodes import make_node

    fused = 0
    for x, t in list(graph.tensors.items()):
        if t.is_constant or t.dtype not in EIGHT_BIT or t.shape is None:
            continue
        readers = graph.consumers()
        region = _region(graph, x, readers)
        if len(region) < 2:
            continue
        best = None
        for node in reversed(region):
            y = node.outputs[0]
            yt = graph.tensors.get(y)
            if yt is None or yt.dtype not in EIGHT_BIT or yt.shape != t.shape:
                continue
            chain = _chain_to(graph, region, y, x, readers)
            if chain is not None and len(chain) >= 2 and (best is None or len(chain) > len(best[1])):
                best = (y, chain)
        if best is None:
            continue
        y, chain = best
        table = f"{y}::table"
        graph.tensors[table] = constant(table, _evaluate(graph, chain, x, y))
        sink = chain[-1]
        affine = _affine(graph, chain, x, y) if graph.tensors[table].value.ndim == 2 else []
        node = make_node(sink.name + "::table", "CodeTable", [x, table], [y], {"affine": affine} if affine else {},
                         graph.opsets.get("", 17), "ai.nnhal")
        drop = {n.name for n in chain}
        graph.nodes = [node if n.name == sink.name else n for n in graph.nodes if n.name not in drop or
                       n.name == sink.name]
        for n in chain:
            for o in n.outputs:
                if o and o != y:
                    graph.tensors.pop(o, None)
        fused += 1
    return fused
