"""The native step program: runs of small element-wise float32 plan steps dispatched by one call into C.

A numpy call costs about a microsecond whatever its size, so a plan of many tiny element-wise nodes pays that per
node. Here each run of consecutive steps that the program supports (see :func:`describe`) becomes one prepared
``native.Program`` (kernels.c, nn_steps.h), made once when the plan is compiled; the straight-line run function
(straight.py) calls ``program.run(arena, arrays)`` once per run for the whole run of steps. Every node is still a
step of its own in C (nothing is fused): the cost per node is the C loop's dispatch and the element loop.

Tensors are bound per run: a step output planned in the arena is a byte offset into the run's arena (each
in-flight run has its own Buffers, so threads never share one); constants are held by the Program; everything
else (graph inputs, results of other kernels that are not in the arena, outputs allocated per run) is passed in
the ``arrays`` tuple. The C side checks each of them through nn_buffer.h on every run.

The ops and their numpy twins: Add, Sub, Mul, Div (same shape, a scalar, or one operand repeated over a block of
axes of the other, e.g. the last axis or the channels), Neg, Abs, Sqrt, Relu and Clip (bit-identical to numpy),
Exp and Tanh (the C library's, within 2 ulp of numpy's), Sigmoid and an Add with a fused activation (the native
Act kernels' own formulas, as the kernels they replace compute them), and Identity (an alias, or a copy into a
graph output).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.device.cpu.kernels import _gates
from nnhal.hostkernels.fused import activation_of
from nnhal.hostkernels.op_clip import ClipKernel
from nnhal.hostkernels.op_identity import IdentityKernel
from nnhal.hostkernels.op_relu import ReluKernel

# opcodes, as numbered in nn_steps.h
OPS = {"add": 0, "sub": 1, "mul": 2, "div": 3, "neg": 4, "abs": 5, "sqrt": 6, "exp": 7, "tanh": 8, "relu": 9,
       "clip": 10, "act": 11, "copy": 12}
_UFUNCS = {np.add: "add", np.subtract: "sub", np.multiply: "mul", np.true_divide: "div", np.negative: "neg",
           np.absolute: "abs", np.sqrt: "sqrt", np.exp: "exp", np.tanh: "tanh"}
_F32 = np.dtype(np.float32)
ARENA, CONST, DYN = 0, 1, 2


def enabled() -> bool:
    """Whether plans compiled now use step programs: the native kernels are loaded and ``NNHAL_CPU_STEPS`` is not
    0 (read when a plan is compiled; A/B measurements and ruling the programs out when a result looks wrong)."""
    return native.available() and os.environ.get("NNHAL_CPU_STEPS", "1") != "0"


@dataclass(frozen=True)
class NativeStep:
    """What one plan step is to the program: ``op`` (an OPS key, or "alias" for an Identity that binds its
    output to its input), its Act (Clip's bounds, an activation) and the shapes of its operands and output."""

    op: str
    act: object
    shapes: tuple[tuple[int, ...], ...]
    out_shape: tuple[int, ...]


def _shape(info) -> tuple[int, ...] | None:
    if info is None or info.dtype != _F32 or not info.static:
        return None
    return tuple(int(d) for d in info.shape)


def _constant_bound(step, slots, pos: int):
    """Clip's bound at input ``pos`` as a float, None when absent; False when it is not a constant."""
    if len(step.ins) <= pos or step.ins[pos] == 0:
        return None
    value = slots[step.ins[pos]]
    if value is None or np.size(value) != 1:
        return False
    return float(np.asarray(value).astype(np.float32).reshape(()))


def _kind(step, slots) -> tuple[str, object] | None:
    """(op, act) of a step the program can run, or None."""
    node = step.node
    ufunc = getattr(step.run, "ufunc", None)
    if ufunc in _UFUNCS and ufunc.nin == len(step.ins):
        return _UFUNCS[ufunc], None
    kernel = step.kernel
    if node.op_type == "Add" and not node.domain and step.kernel_name == "native" and len(step.ins) == 2:
        act = activation_of(node)
        if act is not None:
            lo = None if act.lo is None else float(act.lo)
            hi = None if act.hi is None else float(act.hi)
            return "add", native.make_act(act.kind, lo, hi, act.alpha, act.beta)
    if type(kernel) is ReluKernel:
        return "relu", None
    if type(kernel) is ClipKernel:
        if node.version < 11:
            lo, hi = float(np.float32(node.attrs["min"])), float(np.float32(node.attrs["max"]))
        else:
            lo, hi = _constant_bound(step, slots, 1), _constant_bound(step, slots, 2)
        if lo is False or hi is False:
            return None
        return "clip", native.make_act("clip", lo, hi)
    if getattr(kernel, "gate", None) is not None and node.op_type in ("Sigmoid", "Tanh") \
            and kernel.gate(node) in (_gates.sigmoid_, _gates.tanh_):
        return "act", native.make_act(node.op_type.lower())
    if isinstance(kernel, IdentityKernel):
        return "alias", None
    return None


def describe(step, slots) -> NativeStep | None:
    """The step as the program runs it, or None when it does not take it: a supported op on float32 tensors of
    static shapes in the ONNX layout, one output that is planned (or allocated per run as a graph output), and
    below the size where the element-wise kernels split over the thread pool."""
    if not native.available() or not step.logical or len(step.outs) != 1 or step.outs[0] == 1 \
            or not step.ins or step.ins[0] == 0:
        return None
    kind = _kind(step, slots)
    if kind is None:
        return None
    op, act = kind
    out = _shape(step.expect[0] if step.expect else None)
    used = 1 if op == "clip" else len(step.ins)       # Clip's bounds are in its Act
    shapes = tuple(_shape(i) for i in step.inputs[:used])
    if out is None or len(step.inputs) != len(step.ins) or len(shapes) != used or 0 in step.ins[:used] \
            or any(s is None for s in shapes):
        return None
    if op == "alias" and step.fresh:
        op = "copy"
    buffer = step.buffers[0]
    if not step.fresh and op != "alias" and (buffer is None or buffer.dtype != _F32
                                              or not buffer.flags.c_contiguous or buffer.shape != out):
        return None
    if int(np.prod(out, dtype=np.int64)) >= 2 * parallel.MIN_PART_WORK:
        return None
    if len(shapes) == 2:
        if op not in ("add", "sub", "mul", "div") or np.broadcast_shapes(*shapes) != out \
                or None in (broadcast(shapes[0], out), broadcast(shapes[1], out)) \
                or (shapes[0] != out and shapes[1] != out):
            return None
    elif shapes[0] != out:
        return None
    for i in step.ins[:used]:      # constant operands must be float32 arrays the program can hold as they are
        value = slots[i]
        if value is not None and not (isinstance(value, np.ndarray) and value.dtype == _F32
                                      and value.flags.c_contiguous):
            return None
    return NativeStep(op, act, shapes[:2], out)


def broadcast(shape: tuple[int, ...], out: tuple[int, ...]) -> tuple[int, int] | None:
    """(count, inner) of an operand of ``shape`` broadcast to ``out``: element i of the output reads element
    (i // inner) % count. None when the operand's non-1 axes are not one block of ``out``'s axes."""
    n = int(np.prod(out, dtype=np.int64))
    if shape == out:
        return n, 1
    padded = (1,) * (len(out) - len(shape)) + shape
    if len(padded) != len(out):
        return None
    axes = [d for d, (s, o) in enumerate(zip(padded, out)) if s != 1 and o != 1]
    if any(s not in (1, o) for s, o in zip(padded, out)):
        return None
    if not axes:
        return 1, max(n, 1)
    first, last = axes[0], axes[-1]
    if any(padded[d] != out[d] for d in range(first, last + 1)):
        return None
    count = int(np.prod(out[first:last + 1], dtype=np.int64))
    inner = int(np.prod(out[last + 1:], dtype=np.int64))
    return count, inner


def arena_offset(buffer: np.ndarray | None, arena: np.ndarray) -> int | None:
    """Byte offset of a C-contiguous float32 ``buffer`` inside ``arena``, or None when it is not one."""
    if buffer is None or buffer.dtype != _F32 or not buffer.flags.c_contiguous:
        return None
    offset = buffer.__array_interface__["data"][0] - arena.__array_interface__["data"][0]
    if offset < 0 or offset + buffer.nbytes > arena.nbytes or offset % 4:
        return None
    return offset


class Builder:
    """Builds one Program over consecutive steps: its tensor table, its steps, its constants and the order of
    the dynamic arrays a run passes (each a slot of the plan)."""

    def __init__(self, arena_of: dict[int, int], slots) -> None:
        self.arena_of = arena_of          # slot -> arena byte offset, for outputs always in the arena
        self.slots = slots
        self.refs: dict[tuple, int] = {}  # (kind, where, items) -> tensor index
        self.tensors: list[tuple[int, int, int]] = []
        self.constants: list[np.ndarray] = []
        self.const_index: dict[int, int] = {}
        self.dynamic: list[int] = []      # the slots passed in ``arrays``, in order
        self.dyn_index: dict[int, int] = {}
        self.bound: dict[int, int] = {}   # slot -> tensor index (written or aliased inside this program)
        self.steps: list[tuple] = []

    def _ref(self, kind: int, where: int, items: int) -> int:
        key = (kind, where, items)
        if key not in self.refs:
            self.refs[key] = len(self.tensors)
            self.tensors.append(key)
        return self.refs[key]

    def tensor(self, slot: int, items: int) -> int:
        """The tensor index of ``slot`` as an input."""
        if slot in self.bound:
            return self.bound[slot]
        if slot in self.arena_of:
            return self._ref(ARENA, self.arena_of[slot], items)
        value = self.slots[slot]
        if value is not None:
            if slot not in self.const_index:
                self.const_index[slot] = len(self.constants)
                self.constants.append(value)
            return self._ref(CONST, self.const_index[slot], items)
        return self._ref(DYN, self._dyn(slot), items)

    def _dyn(self, slot: int) -> int:
        if slot not in self.dyn_index:
            self.dyn_index[slot] = len(self.dynamic)
            self.dynamic.append(slot)
        return self.dyn_index[slot]

    def fits(self, step, desc: NativeStep, fresh: bool) -> bool:
        """Whether ``step``'s output, when in the arena, is either disjoint from each input in the arena or
        exactly it (the program refuses a partial overlap on every run; known now for arena tensors)."""
        if fresh or desc.op == "alias":
            return True
        y0 = self.arena_of[step.outs[0]]
        y1 = y0 + 4 * int(np.prod(desc.out_shape, dtype=np.int64))
        for slot, shape in zip(step.ins, desc.shapes):
            ref = self.bound.get(slot)
            kind, where, items = self.tensors[ref] if ref is not None else \
                ((ARENA, self.arena_of[slot], int(np.prod(shape, dtype=np.int64))) if slot in self.arena_of
                 else (DYN, 0, 0))
            if kind == ARENA and where < y1 and y0 < where + 4 * items and (where, 4 * items) != (y0, y1 - y0):
                return False
        return True

    def add(self, step, desc: NativeStep, fresh: bool) -> None:
        """Append ``step``; ``fresh``: its output is an array allocated per run (a graph output)."""
        items = int(np.prod(desc.out_shape, dtype=np.int64))
        ins = [self.tensor(i, int(np.prod(s, dtype=np.int64))) for i, s in zip(step.ins, desc.shapes)]
        out_slot = step.outs[0]
        if desc.op == "alias":
            self.bound[out_slot] = ins[0]
            return
        y = self._ref(DYN, self._dyn(out_slot), items) if fresh else \
            self._ref(ARENA, self.arena_of[out_slot], items)
        self.bound[out_slot] = y
        if len(ins) == 2:
            (ac, ai), (bc, bi) = (broadcast(s, desc.out_shape) for s in desc.shapes)
            self.steps.append((OPS[desc.op], y, ins[0], ins[1], ac, ai, bc, bi, desc.act))
        else:
            self.steps.append((OPS[desc.op], y, ins[0], -1, 0, 0, 0, 0, desc.act))

    def program(self):
        return native.Program(tuple(self.tensors), tuple(self.steps), tuple(self.constants))
