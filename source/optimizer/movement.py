"""Collapse chains of pure data movement into one copy: a row gather, or a reshape when nothing moves.

Exporters lower window attention and similar index games to long chains of copies. Swin's shifted
window partition is Pad -> Slice, Slice, Concat -> Slice, Slice, Concat (torch.roll) -> Reshape ->
Transpose -> Reshape, six copies of the activation; its q/k/v split is Reshape -> Transpose -> Gather
three times, four. Every such chain only moves elements of one source tensor, so its result is
``source.flat[M]`` for a constant index map ``M``, computed once at prepare by running the chain's own
nodes on ``arange(source.size)``. ``M`` is then read as rows of ``C`` contiguous elements (the largest
``C`` that divides every run of consecutive indices and its start) and the chain becomes

    Reshape(source, [R, C]) -> Gather(axis 0, constant rows) -> Reshape(result shape)

one copy of whole rows (the reshapes are views), or a single Reshape when ``M`` is the identity, or
nothing when the shape is unchanged too: the chain's readers then read the source itself (a Transpose
followed by its inverse, a Pad by zero, a crop to the full size).

A *region* is the set of movement nodes between a source (a tensor not produced by movement, or
produced by movement of several sources) and a *sink* (a tensor of the region that something other
than the region reads, or a graph output). A region is replaced only when it copies at least twice,
or copies at least once to produce an unchanged order; a single Transpose or Slice (a channel
shuffle, a head split) is left to the devices' own fusions. When the sink's rows would be shorter
than MIN_ROW_BYTES (a transposed K: one element per row), the region is cut before its last node and
the shorter chain tried instead.
"""
from __future__ import annotations

import hashlib
import math

import numpy as np

from nnhal.errors import NnhalError
from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.tensor import Tensor, TensorKind, constant
from nnhal.hostkernels.evaluate import evaluate_node

# ops that only move elements of their data input(s) (input 0; every input of Concat)
VIEWS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"})
COPIES = frozenset({"Transpose", "Slice", "Concat", "Gather", "Pad", "Split", "Expand", "Tile", "DepthToSpace",
                    "SpaceToDepth"})
# NOTE: rows of at least 8 float32: np.take of 150k float32 in rows of 32 took 35 us where the transposing
# copy it replaced took 61; one element per row it is a per-element gather, slower than a transpose
MIN_ROW_BYTES = 32
# the index map of a region is computed on an int32 (int64 past 2^31) array of the source's size
MAX_SOURCE_ELEMENTS = 1 << 25


def _data_inputs(node: Node) -> list[str]:
    return list(node.inputs) if node.op_type == "Concat" else node.inputs[:1]


def _zero_pad(graph: Graph, node: Node) -> bool:
    """A constant-mode Pad whose pads are all zero (an exporter's pad to a window multiple that is not
    needed at this size): it moves nothing."""
    if node.attrs.get("mode", "constant") != "constant":
        return False
    if node.version < 11:
        pads = node.attrs.get("pads")
    else:
        t = graph.tensors.get(node.input(1))
        pads = t.value if t is not None and t.is_constant else None
    return pads is not None and not np.any(np.asarray(pads))


def _moves(graph: Graph, node: Node) -> bool:
    """Whether ``node`` only moves elements of its data inputs into its outputs, every other input is a
    constant and every tensor involved is static, of one dtype and not quantized."""
    if node.domain or node.implicit_inputs or (node.op_type not in VIEWS and node.op_type not in COPIES):
        return False
    if node.op_type == "Pad" and not _zero_pad(graph, node):
        return False
    data = _data_inputs(node)
    if not data or not all(data):
        return False
    first = graph.tensors.get(data[0])
    if first is None or not first.static or first.dtype.hasobject or 0 in first.shape:
        return False
    for name in node.inputs:
        t = graph.tensors.get(name) if name else None
        if name in data:
            if t is None or t.is_constant or not t.static or t.dtype != first.dtype or t.quant is not None:
                return False
        elif name and (t is None or not t.is_constant or t.value is None):
            return False
    for name in node.outputs:
        t = graph.tensors.get(name) if name else None
        if name and (t is None or not t.static or t.dtype != first.dtype or t.quant is not None or 0 in t.shape):
            return False
    return True


def _rows(index: np.ndarray, size: int) -> tuple[int, np.ndarray]:
    """(C, rows): ``index.flat`` is rows ``rows`` of a (size // C, C) matrix, C as large as possible
    (C == size with rows [0]: the identity order)."""
    flat = index.reshape(-1)
    n = flat.size
    # NOTE: C divides the first run of consecutive indices, its start, the source and result sizes; that
    # candidate almost always holds, checked in one pass, without the run lengths of the whole map
    # (computing those took 0.6 of Swin-T's 1 s at batch 8)
    k = 1024
    while True:
        breaks = np.flatnonzero(np.diff(flat[:k + 1]) != 1)
        if breaks.size or k >= n:
            break
        k *= 16
    first = int(breaks[0]) + 1 if breaks.size else n
    c = math.gcd(first, int(flat[0]), size, n)
    if c > 1:
        rows = flat.reshape(-1, c)
        if not (np.all(rows[:, 0] % c == 0) and np.all(np.diff(rows, axis=1) == 1)):
            starts = np.concatenate(([0], np.flatnonzero(np.diff(flat) != 1) + 1))
            c = math.gcd(c, *np.diff(np.concatenate((starts, [n]))).tolist(), *flat[starts].tolist())
    return c, flat[::c].astype(np.int64) // c


def _pixel_constants(graph: Graph, node: Node, width: int) -> list | None:
    """The node's inputs (None for data inputs) to run it on *pixel* indices, the source's last axis (of
    size ``width``) cut to 1, or None when the node may move elements across that axis: every data input
    and output must end in ``width``, and no axis attribute or input may name the last axis."""
    data = _data_inputs(node)
    for name in data + [o for o in node.outputs if o]:
        shape = graph.tensors[name].shape
        if not shape or shape[-1] != width:
            return None
    rank = len(graph.tensors[data[0]].shape)
    values = [None if n in data or not n else graph.tensors[n].value for n in node.inputs]
    op, last = node.op_type, rank - 1
    if op == "Transpose":
        perm = node.attrs.get("perm")
        return values if perm is not None and list(perm)[-1] == last else None
    if op in ("Concat", "Gather", "Split"):
        return values if node.attrs["axis"] % rank != last else None
    if op == "Slice":
        if node.version < 10:
            starts, axes = node.attrs["starts"], node.attrs.get("axes")
        else:
            starts, axes = values[1], values[3] if len(values) > 3 else None
        axes = range(len(starts)) if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
        return values if all(a % rank != last for a in axes) else None
    if op in ("Reshape", "Expand"):
        target = np.array(values[1], np.int64)
        if target[-1] == width:
            target[-1] = 1
        elif op == "Expand" or target[-1] not in (-1, 0):
            return None
        return [values[0], target] + values[2:]
    if op == "Tile":
        return values if int(np.asarray(values[1]).reshape(-1)[-1]) == 1 else None
    if op == "Squeeze" and node.version < 13 and not node.attrs.get("axes") \
            or op == "Squeeze" and node.version >= 13 and (len(values) < 2 or values[1] is None):
        return None                 # every dimension of size 1 would go, the cut last axis with them
    return values if op in ("Squeeze", "Unsqueeze", "Flatten", "Identity", "Pad") else None


class _Region:
    """The movement nodes between one source and its sinks, with index maps computed lazily."""

    def __init__(self, graph: Graph, source: str, producer: dict[str, Node], memo: dict, sinks: list[str]):
        self.graph, self.source, self.producer, self.memo = graph, source, producer, memo
        self.signatures: dict[str, tuple] = {source: ("source", graph.tensors[source].shape,
                                                      str(graph.tensors[source].dtype))}
        self.values: dict[str, np.ndarray] = {}
        # NOTE: when no node of the region moves elements across the source's last axis (channels stay
        # together: window partitions, rolls, patch merging), the maps are computed on pixel indices, the
        # last axis cut to 1: Swin-T's pass took 0.3-0.6 s at batch 8 on element indices
        self.width, self.inputs = 1, {}
        width = (graph.tensors[source].shape or (1,))[-1]
        if width > 1:
            nodes = {id(n): n for sink in sinks for n in self.nodes(sink)}
            try:
                inputs = {key: _pixel_constants(graph, node, width) for key, node in nodes.items()}
            except (KeyError, IndexError, TypeError, ValueError):   # an attribute or constant of an odd form
                inputs = {0: None}
            if all(v is not None for v in inputs.values()):
                self.width, self.inputs = width, inputs

    def rows(self, name: str) -> tuple[int, np.ndarray]:
        """``_rows`` of ``name``'s map. NOTE: the blocks of one stage repeat the same region on the same
        shapes: the result is kept by the region's signature (ops, attributes, constants, wiring), so
        Swin-T computes each distinct map once (its twelve blocks have four)."""
        key = self.signature(name)
        if key not in self.memo:
            t = self.graph.tensors[self.source]
            c, rows = _rows(self.index(name), t.nbytes // t.dtype.itemsize // self.width)
            self.memo[key] = (c * self.width, rows)
        return self.memo[key]

    def signature(self, name: str) -> tuple:
        if name not in self.signatures:
            node = self.producer[name]
            data = _data_inputs(node)
            inputs = tuple(self.signature(n) if n in data else _constant_key(self.graph, n) for n in node.inputs)
            self.signatures[name] = (node.op_type, node.version, repr(sorted(node.attrs.items())), inputs,
                                     node.outputs.index(name))
        return self.signatures[name]

    def index(self, name: str) -> np.ndarray:
        """The map of ``name``: which element (pixel, when ``width`` > 1) of the source each of its elements
        (pixels) is."""
        if name == self.source and name not in self.values:
            t = self.graph.tensors[name]
            size = t.nbytes // t.dtype.itemsize // self.width
            shape = t.shape[:-1] + (1,) if self.width > 1 else t.shape
            self.values[name] = np.arange(size, dtype=np.int32 if size < 2 ** 31 else np.int64).reshape(shape)
        if name not in self.values:
            node = self.producer[name]
            data = _data_inputs(node)
            if node.op_type == "Pad":
                outs = [self.index(data[0])]
            else:
                constants = self.inputs.get(id(node)) or [self.graph.tensors[n].value if n else None
                                                          for n in node.inputs]
                inputs = [self.index(n) if n in data else v for n, v in zip(node.inputs, constants)]
                outs = evaluate_node(node, inputs)
            for out, value in zip(node.outputs, outs):
                if out:
                    # NOTE: kernels may return views (a Transpose); each reader would copy it again (the three
                    # Gathers of q, k and v took 20 ms each at batch 8): materialise it once
                    self.values[out] = np.ascontiguousarray(value)
        return self.values[name]

    def nodes(self, sink: str) -> list[Node]:
        """The region's nodes that ``sink`` depends on (unordered)."""
        found: dict[int, Node] = {}
        stack = [sink]
        while stack:
            name = stack.pop()
            if name == self.source:
                continue
            node = self.producer[name]
            if id(node) not in found:
                found[id(node)] = node
                stack.extend(_data_inputs(node))
        return list(found.values())


def _plan(region: _Region, sink: str) -> tuple[str, int, np.ndarray | None] | None:
    """(tensor to produce, C, rows or None for a plain reshape) for ``sink`` or a tensor before it,
    or None when no collapse pays."""
    graph = region.graph
    size = int(np.prod(graph.tensors[region.source].shape, dtype=np.int64))
    itemsize = graph.tensors[region.source].dtype.itemsize
    while sink != region.source:
        node = region.producer[sink]
        copies = sum(n.op_type in COPIES for n in region.nodes(sink))
        if len([o for o in node.outputs if o]) != 1 or copies == 0:
            return None
        c, rows = region.rows(sink)
        if c == size and len(rows) == 1:
            return sink, size, None
        if copies >= 2 and c * itemsize >= MIN_ROW_BYTES:
            return sink, c, rows
        data = _data_inputs(node)
        if len(data) != 1:
            return None
        sink = data[0]
    return None


def _constant_key(graph: Graph, name: str) -> tuple:
    if not name:
        return ("absent",)
    value = np.asarray(graph.tensors[name].value)
    return ("constant", value.shape, str(value.dtype), hashlib.sha1(value.tobytes()).hexdigest())


def _regions(graph: Graph) -> tuple[dict[str, list[str]], dict[str, Node]]:
    """(source -> its sinks in graph order, producer of every movement output)."""
    root: dict[str, str] = {}
    producer: dict[str, Node] = {}
    for node in graph.nodes:
        if not _moves(graph, node):
            continue
        sources = {root.get(n, n) for n in _data_inputs(node)}
        if len(sources) != 1:
            continue
        (src,) = sources
        for out in node.outputs:
            if out:
                root[out] = src
                producer[out] = node
    sinks: dict[str, list[str]] = {}
    for node in graph.nodes:
        for name in dict.fromkeys(node.all_inputs):
            if name in root and not any(root.get(o) == root[name] for o in node.outputs if o):
                sinks.setdefault(root[name], []).append(name)
    for name in graph.outputs:
        if name in root:
            sinks.setdefault(root[name], []).append(name)
    for src, names in sinks.items():
        sinks[src] = list(dict.fromkeys(names))
    return sinks, producer


def fresh_name(graph: Graph, base: str) -> str:
    """``base``, or ``base`` with the first number appended that no tensor of ``graph`` is named."""
    name, k = base, 0
    while name in graph.tensors:
        k += 1
        name = f"{base}{k}"
    return name


def collapse_data_movement(graph: Graph) -> int:
    """Replace every movement region that copies more than once (or copies to no effect) by one row
    gather or one reshape (see the module docstring). Returns how many movement nodes left the graph."""
    from nnhal.optimizer.precision import make_node

    sinks, producer = _regions(graph)
    opset = graph.opsets.get("", 17)
    replacement: dict[int, list[Node]] = {}
    memo: dict[tuple, tuple[int, np.ndarray]] = {}
    aliases: dict[str, str] = {}     # an unchanged tensor: its readers read the source itself
    # names that must stay produced: graph outputs and what nested bodies read from this scope
    pinned = set(graph.outputs) | set(graph.outer) | {n for node in graph.nodes for n in node.implicit_inputs}
    for source, names in sinks.items():
        t = graph.tensors[source]
        if not t.static or t.nbytes // t.dtype.itemsize > MAX_SOURCE_ELEMENTS:
            continue
        region = _Region(graph, source, producer, memo, names)
        for sink in names:
            try:
                plan = _plan(region, sink)
            except (NnhalError, ValueError, IndexError, TypeError):   # a kernel refusing index arrays
                plan = None
            if plan is None:
                continue
            target, c, rows = plan
            old = producer[target]
            if id(old) in replacement:
                continue
            out = graph.tensors[target]
            if rows is None and out.shape == t.shape and target not in pinned:
                aliases[target] = source
                replacement[id(old)] = [old]
                continue
            shape = fresh_name(graph, f"{target}__shape")
            graph.tensors[shape] = constant(shape, np.array(out.shape, np.int64))
            if rows is None:
                replacement[id(old)] = [make_node(f"{old.name}/collapsed", "Reshape", [source, shape], [target], {},
                                                  opset)]
                continue
            size = t.nbytes // t.dtype.itemsize
            matrix, gathered = fresh_name(graph, f"{target}__rows_in"), fresh_name(graph, f"{target}__rows_out")
            in_shape, indices = fresh_name(graph, f"{target}__rows_shape"), fresh_name(graph, f"{target}__rows")
            graph.tensors[in_shape] = constant(in_shape, np.array([size // c, c], np.int64))
            graph.tensors[indices] = constant(indices, rows)
            graph.tensors[matrix] = Tensor(matrix, t.dtype, (size // c, c), TensorKind.VARIABLE)
            graph.tensors[gathered] = Tensor(gathered, t.dtype, (len(rows), c), TensorKind.VARIABLE)
            replacement[id(old)] = [
                make_node(f"{old.name}/rows_in", "Reshape", [source, in_shape], [matrix], {}, opset),
                make_node(f"{old.name}/rows", "Gather", [matrix, indices], [gathered], {"axis": 0}, opset),
                make_node(f"{old.name}/rows_out", "Reshape", [gathered, shape], [target], {}, opset)]
    if not replacement:
        return 0
    movers = {id(n) for n in producer.values()}
    present = {id(n) for n in graph.nodes} & movers
    nodes: list[Node] = []
    for node in graph.nodes:
        nodes.extend(replacement.get(id(node), [node]))
    for node in nodes:
        node.inputs = [aliases.get(n, n) for n in node.inputs]
    graph.nodes = nodes
    _drop_unread(graph, movers)
    return len(present - {id(n) for n in graph.nodes})


def _drop_unread(graph: Graph, candidates: set[int]) -> None:
    """Remove the movement nodes (ids in ``candidates``) none of whose outputs anything reads any more,
    and the tensors they wrote."""
    keep = set(graph.outputs) | set(graph.outer)
    while True:
        read = {n for node in graph.nodes for n in node.all_inputs if n} | keep
        dead = [n for n in graph.nodes if id(n) in candidates and not any(o in read for o in n.outputs if o)]
        if not dead:
            return
        gone = {id(n) for n in dead}
        graph.nodes = [n for n in graph.nodes if id(n) not in gone]
        for node in dead:
            for name in node.outputs:
                graph.tensors.pop(name, None)
