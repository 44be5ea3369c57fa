"""The compiled execution plan of a CPU subgraph.

At pre_run every node gets its kernel (chosen by score) and its prepared run
function; buffers come from the memory planner. A run is then a flat loop
over bound steps: gather input slots, call, store output slots.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np

from nnhal.device.cpu.kernels.select import reference_forced, select
from nnhal.device.cpu.layout import Layouts, assign_layouts
from nnhal.device.cpu.planner import MemoryPlan, arena_views, plan_memory
from nnhal.errors import DeviceError, NnhalError, where
from nnhal.graph.graph import Graph
from nnhal.graph.node import Node
from nnhal.graph.tensor import TensorKind
from nnhal.operator.base import Info


def checking() -> bool:
    """NNHAL_CHECK=1 makes every run verify kernel outputs against inference."""
    return os.environ.get("NNHAL_CHECK", "") not in ("", "0")


@dataclass
class Step:
    node: Node
    kernel_name: str
    run: object
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    buffers: list                     # preallocated outputs (None = kernel allocates)
    fresh: tuple[tuple[int, tuple, np.dtype], ...] = ()  # (position, shape, dtype) allocated per run
    expect: tuple[Info | None, ...] = ()


@dataclass
class Plan:
    """A compiled subgraph: run(values) reads inputs from and writes outputs to ``values``."""

    steps: list[Step]
    slots: list                                   # template: constants filled, rest None
    inputs: list[tuple[str, int]]
    outputs: list[tuple[str, int]]
    memory: MemoryPlan
    arena: np.ndarray
    kernels: dict[str, str] = field(default_factory=dict)

    def run(self, values: dict[str, np.ndarray]) -> None:
        slots = list(self.slots)
        for name, idx in self.inputs:
            slots[idx] = values[name]
        check = checking()
        for step in self.steps:
            bufs = step.buffers
            if step.fresh:
                bufs = list(bufs)
                for pos, shape, dtype in step.fresh:
                    bufs[pos] = np.empty(shape, dtype)
            try:
                result = step.run([slots[i] for i in step.ins], bufs)
            except NnhalError:
                raise
            except Exception as exc:
                raise DeviceError(f"{where(step.node, 'cpu')}: kernel '{step.kernel_name}' failed: "
                                  f"{type(exc).__name__}: {exc}") from exc
            for pos, (idx, r) in enumerate(zip(step.outs, result)):
                buf = bufs[pos]
                if buf is not None and r is not buf:
                    np.copyto(buf, r, casting="unsafe")
                    r = buf
                slots[idx] = r
            if check:
                _verify(step, result)
        for name, idx in self.outputs:
            values[name] = slots[idx]


def compile_nodes(graph: Graph, nodes: list[Node], inputs: list[str], outputs: list[str]) -> Plan:
    """Build the plan for ``nodes`` of ``graph`` reading ``inputs`` and producing ``outputs``."""
    index: dict[str, int] = {"": 0}
    slots: list = [None, None]  # 0: absent input (None); 1: sink for absent outputs

    layouts = Layouts({}, {})

    def slot(name: str) -> int:
        if name not in index:
            index[name] = len(slots)
            t = graph.tensors.get(name)
            if name in layouts.constants:
                slots.append(layouts.constants[name])
            else:
                slots.append(t.value if t is not None and t.kind is TensorKind.CONSTANT else None)
        return index[name]

    def info(name: str) -> Info | None:
        if not name:
            return None
        t = graph.tensors.get(name)
        if t is None:
            return Info(None, None)
        return Info(t.dtype, t.shape, t.value if t.kind is TensorKind.CONSTANT else None)

    external = set(inputs) | set(outputs)
    chosen = []
    for node in nodes:
        ins = [info(n) for n in node.inputs]
        outs = [info(n) or Info(None, None) for n in node.outputs]
        kernel = select(node, ins, outs)
        chosen.append((node, kernel, ins, outs))
    if not reference_forced():
        chosen = fuse_gelu(chosen, external)
        chosen = fuse_matmul(chosen, external)
        chosen = fuse_activations(chosen, external)
        chosen, layouts = assign_layouts(chosen, external)
    physical = layouts.physical
    sizes: dict[str, int] = {}
    shapes: dict[str, tuple] = {}
    dtypes: dict[str, np.dtype] = {}
    for node, kernel, _, _ in chosen:
        for name in node.outputs:
            t = graph.tensors.get(name)
            if name in physical:
                p = physical[name]
                sizes[name] = int(np.prod(p.shape, dtype=np.int64)) * p.dtype.itemsize
                shapes[name], dtypes[name] = tuple(p.shape), p.dtype
            elif name and name not in external and t is not None and t.static and not t.is_constant \
                    and not t.dtype.hasobject:
                sizes[name] = t.nbytes
                shapes[name], dtypes[name] = t.shape, t.dtype
    slices = {} if reference_forced() else concat_slices(graph, chosen, sizes, skip=set(physical))
    memory = plan_memory([(n.all_inputs, n.outputs, k.inplace, k.view) for n, k, _, _ in chosen], sizes, external,
                         slices)
    arena = np.empty(max(memory.arena_bytes, 1), dtype=np.uint8)
    views = arena_views(memory, arena, shapes, dtypes)
    steps: list[Step] = []
    kernels: dict[str, str] = {}
    for node, kernel, ins, outs in chosen:
        try:
            run = kernel.prepare(node, ins, outs)
        except NnhalError:
            raise
        except Exception as exc:
            raise DeviceError(f"{where(node, 'cpu')}: preparing kernel '{kernel.name}' failed: {exc}") from exc
        buffers, fresh = [], []
        for pos, name in enumerate(node.outputs):
            t = graph.tensors.get(name) if name else None
            buffers.append(views.get(name))
            if name in external and t is not None and t.static:
                fresh.append((pos, t.shape, t.dtype))
        expect = tuple(physical.get(name, o) if name else o for name, o in zip(node.outputs, outs))
        steps.append(Step(node, kernel.name, run, tuple(slot(n) if n else 0 for n in node.all_inputs),
                          tuple(slot(n) if n else 1 for n in node.outputs), buffers, tuple(fresh), expect))
        kernels[node.name] = kernel.name
    in_slots = [(n, slot(n)) for n in inputs]
    out_slots = [(n, slot(n)) for n in outputs]
    return Plan(steps, slots, in_slots, out_slots, memory, arena, kernels)


def concat_slices(graph: Graph, chosen: list, sizes: dict[str, int], skip: set[str] = frozenset()) \
        -> dict[str, tuple[str, int]]:
    """Concat inputs the planner can place inside the Concat output's buffer, as name -> (output, byte offset):
    their producers then write straight into the output and the Concat copies nothing.

    Only where every input slice is one contiguous block (all dims before the axis are 1, as at batch 1),
    for planned inputs read once by that Concat, produced here, not a view of another tensor and not
    already placed in another Concat, and not in ``skip`` (channels-last outputs: their slices are strided).
    Concats are taken last first so nested ones (DenseNet) chain."""
    produced: dict[str, tuple[Node, object]] = {}
    for node, kernel, _, _ in chosen:
        for k, name in enumerate(node.outputs):
            if name:
                produced[name] = (node, k, kernel)
    slices: dict[str, tuple[str, int]] = {}
    for node, kernel, _, _ in reversed(chosen):
        if node.op_type != "Concat" or node.domain or not getattr(kernel, "writes_in_place", False):
            continue
        out = node.outputs[0]
        t = graph.tensors.get(out)
        if out not in sizes or out in skip or t is None or t.shape is None:
            continue
        rank = len(t.shape)
        axis = node.attrs["axis"] % rank
        if any(d != 1 for d in t.shape[:axis]):
            continue
        inner = int(np.prod(t.shape[axis + 1:], dtype=np.int64)) * t.dtype.itemsize
        counts = Counter(node.inputs)
        off = 0
        for name in node.inputs:
            it = graph.tensors.get(name) if name else None
            if it is None or it.shape is None or len(it.shape) != rank:
                break
            size = int(it.shape[axis]) * inner
            prod = produced.get(name)
            if name in sizes and counts[name] == 1 and name not in slices and prod is not None \
                    and prod[1] not in prod[2].view and it.dtype == t.dtype and sizes[name] == size:
                slices[name] = (out, off)
            off += size
    return slices


def _scalar(info: Info | None, value: float, dtype) -> bool:
    """``info`` is a constant single-element ``dtype`` tensor equal to ``value`` (in that dtype)."""
    if info is None or info.value is None:
        return False
    v = np.asarray(info.value)
    return v.dtype == dtype and v.size == 1 and v.reshape(()) == np.asarray(value, dtype)


def _readers(chosen: list) -> tuple[Counter, dict[str, int], dict[str, int]]:
    """(read counts, first reader position, producer position) of every tensor name."""
    reads = Counter(n for node, _, _, _ in chosen for n in node.all_inputs if n)
    reader: dict[str, int] = {}
    producer: dict[str, int] = {}
    for pos, (node, _, _, _) in enumerate(chosen):
        for n in node.all_inputs:
            if n:
                reader.setdefault(n, pos)
        for n in node.outputs:
            if n:
                producer[n] = pos
    return reads, reader, producer


def fuse_gelu(chosen: list, external: set[str]) -> list:
    """torch.onnx's exact Gelu, Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5) in float32 (either operand
    order of the Adds and Muls), becomes one Gelu node when its fast kernel takes it and no intermediate
    is read elsewhere or leaves the subgraph. The fast kernel runs the same float32 steps."""
    f32 = np.dtype(np.float32)
    reads, reader, _ = _readers(chosen)
    dropped: set[int] = set()
    replaced: dict[int, tuple] = {}

    def single(name: str, op: str) -> int | None:
        if not name or name in external or reads[name] != 1:
            return None
        j = reader.get(name)
        if j is None or j in dropped or chosen[j][0].op_type != op or chosen[j][0].domain:
            return None
        return j

    def other(node: Node, ins: list, name: str) -> Info | None:
        if len(node.inputs) != 2 or node.inputs.count(name) != 1:
            return None
        return ins[1] if node.inputs[0] == name else ins[0]

    for pos, (node, kernel, ins, outs) in enumerate(chosen):
        if node.op_type != "Div" or node.domain or pos in dropped or len(node.inputs) != 2 or not node.outputs[0]:
            continue
        x = node.inputs[0]
        if not x or x == node.inputs[1] or ins[0] is None or ins[0].dtype != f32 or outs[0].dtype != f32 \
                or ins[0].shape is None or outs[0].shape != ins[0].shape or not _scalar(ins[1], 1.4142135381698608, f32):
            continue
        j_erf = single(node.outputs[0], "Erf")
        if j_erf is None:
            continue
        j_add = single(chosen[j_erf][0].outputs[0], "Add")
        if j_add is None:
            continue
        add = chosen[j_add]
        if not _scalar(other(add[0], add[2], chosen[j_erf][0].outputs[0]), 1.0, f32):
            continue
        j_mul = single(add[0].outputs[0], "Mul")
        if j_mul is None:
            continue
        mul = chosen[j_mul]
        if len(mul[0].inputs) != 2 or set(mul[0].inputs) != {x, add[0].outputs[0]}:
            continue
        j_half = single(mul[0].outputs[0], "Mul")
        if j_half is None:
            continue
        half = chosen[j_half]
        if not _scalar(other(half[0], half[2], mul[0].outputs[0]), 0.5, f32) or half[3][0].dtype != f32 \
                or half[3][0].shape != ins[0].shape or not half[0].outputs[0]:
            continue
        gelu = Node(f"{node.name}/gelu", "Gelu", [x], [half[0].outputs[0]], {"approximate": "none"},
                    opset=20, version=20)
        g_ins, g_outs = [ins[0]], [half[3][0]]
        try:
            kernel = select(gelu, g_ins, g_outs)
        except NnhalError:
            continue
        if kernel.name == "reference":
            continue
        replaced[pos] = (gelu, kernel, g_ins, g_outs)
        dropped.update((j_erf, j_add, j_mul, j_half))
    return [replaced.get(pos, entry) for pos, entry in enumerate(chosen) if pos not in dropped]


_EPILOGUE_OPS = ("Add", "Mul", "Sub", "Div")


def fuse_matmul(chosen: list, external: set[str]) -> list:
    """Fold into a MatMul (its kernel reads the ``_nnhal_epilogue`` attribute, op_matmul) a chain of
    element-wise Add/Mul (either side), Sub/Div (product first) by a tensor available before the MatMul
    and broadcasting to the product's shape and dtype (bias, scale, mask, residual), run in place on the
    product, optionally ended by a float32 Gelu whose fast kernel was chosen (the fused one from
    fuse_gelu). Every intermediate must have no other reader and not leave the subgraph.
    (Transpose views as MatMul inputs/outputs and a fused attention Softmax were measured slower on the
    BERT encoder at batch 8 than the separate copies: strided BLAS operands and many small GEMMs.)"""
    from nnhal.device.cpu.kernels.op_matmul import EPILOGUE

    chosen = list(chosen)
    changed = True
    while changed:
        changed = False
        reads, reader, producer = _readers(chosen)
        for pos, (node, kernel, ins, outs) in enumerate(chosen):
            if node.op_type != "MatMul" or node.domain or kernel.name != "reference" or FUSED_ATTR in node.attrs \
                    or len(node.outputs) != 1 or not node.outputs[0]:
                continue
            out = node.outputs[0]
            if out in external or reads[out] != 1:
                continue
            j = reader.get(out)
            nxt, n_kernel, n_ins, n_outs = chosen[j]
            if nxt.domain or len(nxt.outputs) != 1 or not nxt.outputs[0]:
                continue
            epi = node.attrs.get(EPILOGUE, ())
            if epi and epi[-1][0] == "Gelu":
                continue
            if nxt.op_type == "Gelu" and getattr(n_kernel, "name", "") == "fast" and outs[0].dtype == np.float32 and outs[0].shape is not None \
                    and all(isinstance(d, int) for d in outs[0].shape) and n_outs[0].shape == outs[0].shape:
                node = replace(node, outputs=list(nxt.outputs), attrs={**node.attrs, EPILOGUE: tuple(epi) + (("Gelu", -1),)})
                chosen[pos] = (node, kernel, ins, list(n_outs))
                del chosen[j]
                changed = True
                break
            if nxt.op_type not in _EPILOGUE_OPS or len(nxt.inputs) != 2 or nxt.inputs.count(out) != 1:
                continue
            k = 1 if nxt.inputs[0] == out else 0
            if k == 0 and nxt.op_type in ("Sub", "Div"):
                continue
            operand, o_info = nxt.inputs[k], n_ins[k]
            y = outs[0]
            if not operand or o_info is None or o_info.shape is None or y.shape is None or y.dtype is None \
                    or y.dtype.kind != "f" or o_info.dtype != y.dtype or n_outs[0].dtype != y.dtype \
                    or n_outs[0].shape != y.shape or any(d is None for d in y.shape) \
                    or any(d is None for d in o_info.shape):
                continue
            try:
                if np.broadcast_shapes(tuple(y.shape), tuple(o_info.shape)) != tuple(y.shape):
                    continue
            except ValueError:
                continue
            if producer.get(operand, -1) >= pos and operand in producer:
                continue
            node = replace(node, inputs=list(node.inputs) + [operand], outputs=list(nxt.outputs),
                           attrs={**node.attrs, EPILOGUE: tuple(node.attrs.get(EPILOGUE, ())) +
                                  ((nxt.op_type, len(node.inputs)),)})
            chosen[pos] = (node, kernel, list(ins) + [o_info], list(n_outs))
            del chosen[j]
            changed = True
            break
    return chosen


FUSED_ATTR = "_nnhal_activation"


def _activation(node: Node, ins: list[Info | None], dtype) -> tuple | None:
    """('relu',) or ('clip', lo, hi) when ``node`` is an activation a producer can apply in place."""
    if node.domain or len(node.outputs) != 1 or not node.outputs[0]:
        return None
    if node.op_type == "Relu":
        return ("relu",)
    if node.op_type != "Clip":
        return None
    if node.version < 11:
        lo, hi = node.attrs["min"], node.attrs["max"]
    else:
        bounds = []
        for k in (1, 2):
            if k < len(ins) and ins[k] is not None:
                if ins[k].value is None:
                    return None
                bounds.append(ins[k].value)
            else:
                bounds.append(None)
        lo, hi = bounds
    with np.errstate(over="ignore"):
        lo = None if lo is None else np.asarray(lo).astype(dtype).reshape(())
        hi = None if hi is None else np.asarray(hi).astype(dtype).reshape(())
    return ("clip", lo, hi)


def fuse_activations(chosen: list, external: set[str]) -> list:
    """Fold Relu/Clip into the producing node's epilogue when its kernel can apply it in place
    (``fuse_activation``), the intermediate has no other reader and is not a subgraph output."""
    reads = Counter(n for node, _, _, _ in chosen for n in node.all_inputs if n)
    reader = {}
    for pos, (node, _, _, _) in enumerate(chosen):
        for n in node.all_inputs:
            if n:
                reader.setdefault(n, pos)
    result, dropped = [], set()
    for pos, (node, kernel, ins, outs) in enumerate(chosen):
        if pos in dropped:
            continue
        live = [o for o in node.outputs if o]
        if getattr(kernel, "fuse_activation", False) and len(node.outputs) == 1 and len(live) == 1 \
                and live[0] not in external and reads[live[0]] == 1 and FUSED_ATTR not in node.attrs:
            j = reader.get(live[0])
            nxt = chosen[j] if j is not None else None
            if nxt is not None and nxt[0].inputs and nxt[0].inputs[0] == live[0] and outs[0].dtype is not None \
                    and outs[0].dtype.kind == "f" and nxt[3][0].dtype == outs[0].dtype:
                act = _activation(nxt[0], nxt[2], outs[0].dtype)
                if act is not None:
                    node = replace(node, outputs=list(nxt[0].outputs), attrs={**node.attrs, FUSED_ATTR: act})
                    outs = list(nxt[3])
                    dropped.add(j)
        result.append((node, kernel, ins, outs))
    return result


def _verify(step: Step, result) -> None:
    for name, r, expect in zip(step.node.outputs, result, step.expect):
        if not name or expect is None:
            continue
        r = np.asarray(r)
        if expect.dtype is not None and r.dtype != expect.dtype:
            raise DeviceError(f"{where(step.node, 'cpu')}: output '{name}' has dtype {r.dtype}; inference said {expect.dtype}")
        if expect.shape is not None and (len(r.shape) != len(expect.shape) or any(
                e is not None and e != d for e, d in zip(expect.shape, r.shape))):
            raise DeviceError(f"{where(step.node, 'cpu')}: output '{name}' has shape {r.shape}; inference said {expect.shape}")
