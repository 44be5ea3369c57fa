"""Differential random-graph testing, after NNAPI's CTS random graph generator.

A seeded generator builds small valid ONNX graphs (random shapes and
attributes, chains and branches) from the ops a device describes. Each graph
runs on the device under test and on the CPU reference kernels; outputs are
compared with the tolerance policy. A failing seed is minimized to the
smallest failing cone of nodes and printed so it can be replayed:

    from nnhal.conformance.random_graph import replay
    replay(seed, "vnpu")
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from nnhal.conformance.tolerance import compare, kit_policy
from nnhal.device.manager import FALLBACK_DEVICE

OPSET = 17
Shape = tuple[int, ...]


@dataclass
class _Build:
    rng: np.random.Generator
    nodes: list = field(default_factory=list)
    inits: list = field(default_factory=list)
    pool: list[tuple[str, Shape]] = field(default_factory=list)
    count: int = 0

    def fresh(self, base: str) -> str:
        self.count += 1
        return f"{base}{self.count}"

    def const(self, array: np.ndarray) -> str:
        name = self.fresh("c")
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def pick(self, rank: int | None = None) -> tuple[str, Shape] | None:
        choices = [t for t in self.pool if rank is None or len(t[1]) == rank]
        if not choices:
            return None
        # prefer recent tensors (chains) but sometimes reach back (branches)
        weights = np.linspace(1.0, 3.0, len(choices))
        return choices[int(self.rng.choice(len(choices), p=weights / weights.sum()))]

    def add(self, op: str, inputs: list[str], shape: Shape, **attrs) -> None:
        out = self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.fresh(f"n_{op}_"), **attrs))
        self.pool.append((out, shape))


def _unary(op: str, **attrs) -> Callable[[_Build], bool]:
    def gen(b: _Build) -> bool:
        x = b.pick()
        b.add(op, [x[0]], x[1], **attrs)
        return True
    return gen


def _binary(op: str) -> Callable[[_Build], bool]:
    def gen(b: _Build) -> bool:
        x = b.pick()
        same = [t for t in b.pool if t[1] == x[1] and t[0] != x[0]]
        if same and b.rng.random() < 0.6:
            other = same[int(b.rng.integers(len(same)))][0]
        else:
            shape = list(x[1])
            for i in range(len(shape)):
                if b.rng.random() < 0.5:
                    shape[i] = 1
            other = b.const(b.rng.uniform(0.5, 1.5, shape).astype(np.float32))
        b.add(op, [x[0], other], x[1])
        return True
    return gen


def _conv(b: _Build) -> bool:
    x = b.pick(4)
    if x is None:
        return False
    n, c, h, w = x[1]
    k = int(b.rng.integers(1, 4))
    stride = int(b.rng.integers(1, 3))
    pads = [int(b.rng.integers(0, k)) for _ in range(4)]
    kind = b.rng.random()
    group = c if kind < 0.3 else (1 if kind < 0.8 or c % 2 else 2)
    m = group * int(b.rng.integers(1, 4)) if group > 1 else int(b.rng.integers(1, 9))
    oh = (h + pads[0] + pads[2] - k) // stride + 1
    ow = (w + pads[1] + pads[3] - k) // stride + 1
    if oh < 1 or ow < 1:
        return False
    wgt = (b.rng.standard_normal((m, c // group, k, k)) * np.sqrt(2.0 / (c // group * k * k))).astype(np.float32)
    inputs = [x[0], b.const(wgt)]
    if b.rng.random() < 0.7:
        inputs.append(b.const((b.rng.standard_normal(m) * 0.1).astype(np.float32)))
    b.add("Conv", inputs, (n, m, oh, ow), kernel_shape=[k, k], strides=[stride, stride], pads=pads, group=group)
    return True


def _pool(op: str) -> Callable[[_Build], bool]:
    def gen(b: _Build) -> bool:
        x = b.pick(4)
        if x is None:
            return False
        n, c, h, w = x[1]
        k = int(b.rng.integers(2, 4))
        stride = int(b.rng.integers(1, 3))
        pads = [int(b.rng.integers(0, k)) for _ in range(4)] if b.rng.random() < 0.5 else [0, 0, 0, 0]
        oh = (h + pads[0] + pads[2] - k) // stride + 1
        ow = (w + pads[1] + pads[3] - k) // stride + 1
        if oh < 1 or ow < 1:
            return False
        attrs = {"kernel_shape": [k, k], "strides": [stride, stride], "pads": pads}
        if op == "AveragePool":
            attrs["count_include_pad"] = int(b.rng.integers(0, 2))
        b.add(op, [x[0]], (n, c, oh, ow), **attrs)
        return True
    return gen


def _global_pool(b: _Build) -> bool:
    x = b.pick(4)
    if x is None:
        return False
    b.add("GlobalAveragePool", [x[0]], x[1][:2] + (1, 1))
    return True


def _concat(b: _Build) -> bool:
    x = b.pick(4)
    if x is None:
        return False
    mates = [t for t in b.pool if len(t[1]) == 4 and t[1][0] == x[1][0] and t[1][2:] == x[1][2:]]
    y = mates[int(b.rng.integers(len(mates)))]
    b.add("Concat", [x[0], y[0]], (x[1][0], x[1][1] + y[1][1]) + x[1][2:], axis=1)
    return True


def _transpose(b: _Build) -> bool:
    x = b.pick()
    perm = [int(p) for p in b.rng.permutation(len(x[1]))]
    b.add("Transpose", [x[0]], tuple(x[1][p] for p in perm), perm=perm)
    return True


def _flatten(b: _Build) -> bool:
    x = b.pick(4)
    if x is None:
        return False
    b.add("Reshape", [x[0], b.const(np.array([x[1][0], -1], np.int64))], (x[1][0], int(np.prod(x[1][1:]))))
    return True


def _gemm(b: _Build) -> bool:
    x = b.pick(2)
    if x is None:
        return False
    n, k = x[1]
    m = int(b.rng.integers(1, 17))
    wgt = (b.rng.standard_normal((m, k)) * np.sqrt(2.0 / k)).astype(np.float32)
    b.add("Gemm", [x[0], b.const(wgt), b.const((b.rng.standard_normal(m) * 0.1).astype(np.float32))], (n, m), transB=1)
    return True


def _matmul(b: _Build) -> bool:
    x = b.pick(2)
    if x is None:
        return False
    n, k = x[1]
    m = int(b.rng.integers(1, 17))
    b.add("MatMul", [x[0], b.const((b.rng.standard_normal((k, m)) * np.sqrt(1.0 / k)).astype(np.float32))], (n, m))
    return True


def _clip(b: _Build) -> bool:
    x = b.pick()
    lo = float(b.rng.uniform(-1, 0))
    hi = lo + float(b.rng.uniform(0.5, 6))
    b.add("Clip", [x[0], b.const(np.array(lo, np.float32)), b.const(np.array(hi, np.float32))], x[1])
    return True


def _softmax(b: _Build) -> bool:
    x = b.pick()
    b.add("Softmax", [x[0]], x[1], axis=int(b.rng.integers(-len(x[1]), len(x[1]))))
    return True


def _batchnorm(b: _Build) -> bool:
    x = b.pick(4)
    if x is None:
        return False
    c = x[1][1]
    params = [b.rng.uniform(0.5, 1.5, c), b.rng.standard_normal(c) * 0.1, b.rng.standard_normal(c) * 0.1,
              b.rng.uniform(0.5, 1.5, c)]
    b.add("BatchNormalization", [x[0]] + [b.const(p.astype(np.float32)) for p in params], x[1])
    return True


def _reduce_mean(b: _Build) -> bool:
    x = b.pick()
    axis = int(b.rng.integers(0, len(x[1])))
    shape = tuple(1 if i == axis else d for i, d in enumerate(x[1]))
    b.add("ReduceMean", [x[0]], shape, axes=[axis], keepdims=1)
    return True


GENERATORS: dict[str, Callable[[_Build], bool]] = {
    "Relu": _unary("Relu"), "Sigmoid": _unary("Sigmoid"), "Tanh": _unary("Tanh"), "Abs": _unary("Abs"),
    "Neg": _unary("Neg"), "LeakyRelu": _unary("LeakyRelu", alpha=0.1),
    "Add": _binary("Add"), "Sub": _binary("Sub"), "Mul": _binary("Mul"), "Max": _binary("Max"), "Min": _binary("Min"),
    "Conv": _conv, "MaxPool": _pool("MaxPool"), "AveragePool": _pool("AveragePool"),
    "GlobalAveragePool": _global_pool, "Concat": _concat, "Transpose": _transpose, "Reshape": _flatten,
    "Gemm": _gemm, "MatMul": _matmul, "Clip": _clip, "Softmax": _softmax, "BatchNormalization": _batchnorm,
    "ReduceMean": _reduce_mean,
}


def generate(seed: int, ops: Iterable[str], max_nodes: int = 8) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A random valid graph over ``ops`` (those with a generator) and seeded inputs."""
    rng = np.random.default_rng(seed)
    usable = sorted(set(ops) & set(GENERATORS))
    if not usable:
        raise ValueError(f"no random-graph generator for any of {sorted(ops)}; generators: {sorted(GENERATORS)}")
    b = _Build(rng)
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 9)), int(rng.integers(3, 13)), int(rng.integers(3, 13)))
    b.pool.append(("x", shape))
    target = int(rng.integers(2, max_nodes + 1))
    attempts = 0
    while len(b.nodes) < target and attempts < 20 * max_nodes:
        attempts += 1
        op = usable[int(rng.integers(len(usable)))]
        GENERATORS[op](b)
    consumed = {i for n in b.nodes for i in n.input}
    leaves = [(n, s) for n, s in b.pool if n not in consumed and n != "x"] or [b.pool[-1]]
    graph = helper.make_graph(
        b.nodes, f"random_{seed}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in leaves], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    return model, feeds


@dataclass
class Mismatch:
    seed: int
    device: str
    reason: str
    nodes: list[str]           # the minimized failing cone, "name (op)"
    replay_args: str = ""      # the arguments after seed and device that rebuild the same graph

    def __str__(self) -> str:
        return (f"seed {self.seed} on device '{self.device}': {self.reason}; minimized to {len(self.nodes)} node(s): "
                f"{', '.join(self.nodes)}; replay with nnhal.conformance.random_graph.replay({self.seed}, "
                f"'{self.device}'{self.replay_args})")


def _run(model: onnx.ModelProto, feeds: dict, devices: list[str], precision: str, reference: bool) -> list[np.ndarray]:
    from nnhal.hostkernels.select import force_reference
    from nnhal.session import Session

    with force_reference() if reference else contextlib.nullcontext():
        with Session(model, devices=devices, precision=precision, num_thread=1) as s:
            return s.run(feeds)


def _mismatch(model: onnx.ModelProto, feeds: dict, device: str, precision: str) -> str | None:
    """Why the device's outputs differ from the reference's beyond the policy (None if they do not).

    fp32 and fp16 compare with the CPU's reference kernels in fp32. A quantized precision compares
    with the CPU's own quantized execution on the same calibration (the quantized reference): the
    two may round differently once per quantized op, so each op may add one step of the output's
    range (the float image of "off by one" per op).
    """
    got = _run(model, feeds, [device], precision, reference=False)
    quantized = precision in ("int8", "uint8")
    want = _run(model, feeds, [FALLBACK_DEVICE], precision if quantized else "fp32", reference=not quantized)
    tol = kit_policy(precision, {n.op_type for n in model.graph.node})
    if quantized:
        tol = replace(tol, atol=max(tol.atol, _widest_step(model, feeds) * len(model.graph.node)))
    for name, g, w in zip([o.name for o in model.graph.output], got, want):
        why = compare(g, w, tol)
        if why:
            return f"output '{name}': {why}"
    return None


def _widest_step(model: onnx.ModelProto, feeds: dict) -> float:
    """One 8-bit step of the widest range of any tensor of the graph (from an fp32 CPU run)."""
    from nnhal.optimizer.infer import infer_graph
    from nnhal.optimizer.quantize import collect
    from nnhal.serializer import load_onnx

    graph = load_onnx(model)
    for name, value in feeds.items():
        graph.tensors[name].dtype, graph.tensors[name].shape = value.dtype, value.shape
    infer_graph(graph)
    widths = [max(hi, 0.0) - min(lo, 0.0) for lo, hi, _ in collect(graph, [feeds]).values()]
    return max(widths, default=0.0) / 255.0


def _cone(model: onnx.ModelProto, output: str) -> onnx.ModelProto:
    """The sub-model computing ``output`` alone."""
    producers = {o: n for n in model.graph.node for o in n.output}
    needed, stack = set(), [output]
    while stack:
        name = stack.pop()
        node = producers.get(name)
        if node is not None and node.name not in needed:
            needed.add(node.name)
            stack.extend(node.input)
    nodes = [n for n in model.graph.node if n.name in needed]
    used = {i for n in nodes for i in n.input}
    shape_of = {o.name: o for o in model.graph.output}
    out = shape_of.get(output) or helper.make_tensor_value_info(output, TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, model.graph.name + "_min", list(model.graph.input), [out],
                              [i for i in model.graph.initializer if i.name in used])
    m = helper.make_model(graph, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    return m


def minimize(model: onnx.ModelProto, feeds: dict, device: str, precision: str) -> tuple[onnx.ModelProto, str]:
    """The smallest cone (first failing node in topological order) that still mismatches."""
    for node in model.graph.node:
        cone = _cone(model, node.output[0])
        why = _mismatch(cone, feeds, device, precision)
        if why:
            return cone, why
    return model, _mismatch(model, feeds, device, precision) or "mismatch not reproduced"


def differential(device: str, seeds: Iterable[int], precision: str | None = None, ops: Iterable[str] | None = None,
                 max_nodes: int = 8) -> list[Mismatch]:
    """Run random graphs on ``device`` and on the CPU reference; return every (minimized) mismatch.

    ``precision`` defaults to fp32 when the device runs it, else the first precision it describes.
    """
    from nnhal.device.manager import find_device

    description = find_device(device).describe()
    extra = (f", precision='{precision}'" if precision else "") + (f", ops={sorted(set(ops))}" if ops else "") \
        + (f", max_nodes={max_nodes}" if max_nodes != 8 else "")
    if precision is None:
        precision = "fp32" if "fp32" in description.precisions else description.precisions[0]
    described = description.ops
    usable = set(ops or described) & set(described)
    found = []
    for seed in seeds:
        model, feeds = generate(seed, usable, max_nodes)
        why = _mismatch(model, feeds, device, precision)
        if why:
            small, why = minimize(model, feeds, device, precision)
            found.append(Mismatch(seed, device, why, [f"{n.name} ({n.op_type})" for n in small.graph.node], extra))
    return found


def replay(seed: int, device: str, precision: str | None = None, ops: Iterable[str] | None = None,
           max_nodes: int = 8) -> Mismatch | None:
    """Rebuild one seed's graph and report its (minimized) mismatch, or None."""
    found = differential(device, [seed], precision, ops, max_nodes)
    return found[0] if found else None
