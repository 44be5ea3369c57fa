"""Straight-line run functions for CPU plans: the per-node framework cost of a run, made small.

A plan's steps never change after pre_run, so instead of interpreting them (a loop that reads each step's
record, gathers its inputs by slot index and stores its outputs back) the plan generates, once, Python
functions whose bodies are the steps unrolled: every tensor a local variable, every kernel's run function
and constant a local bound once per call, one source line per step. Steps go in chunks of CHUNK per
function (CPython compiles one huge function in more than linear time); tensors that cross a chunk
boundary pass through the run's slot list. Per node, no dict lookup, no loop bookkeeping and no allocation
beyond the kernel's argument list happen. Source lines map back to steps, so a failing kernel is still
reported with its node. Profiling (per-step timings) and NNHAL_CHECK keep the interpreting loop.

Runs of consecutive small element-wise float32 steps go further: each run is one prepared native step program
(steps.py) called once on the line of its first step; the lines of its other steps only bind, as locals, the
outputs that steps after the run read.

A step whose operands are all fixed for a buffer set (constants, and the planned arena buffers of earlier steps,
which every run on that set writes in place) and whose outputs are all planned buffers may be *bound*: its
kernel's run function carries ``bind(inputs, outputs)``, which returns a zero-argument callable doing the step on
exactly those arrays (views reshaped, the thread split chosen and the checks done once), or None. The generated
line of such a step is one call ``B[k]()``; ``B`` (:func:`bind`) is laid out per buffer set and per thread split
(Plan: ``Buffers.bound``), never shared by two sets, so two threads running on two sets share no bound view.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import CodeType

import numpy as np

from nnhal.device.cpu import parallel
from nnhal.device.cpu import steps as native_steps
from nnhal.errors import DeviceError, where, wrapped
from nnhal.hostkernels.op_identity import IdentityKernel

CHUNK = 256           # steps per generated function
FIRST_STEP_LINE = 3   # line of a chunk's first step (after the def line and the bindings line)


@dataclass(frozen=True)
class Chunk:
    """One generated function ``run(S, per_step, arena)`` over steps [first, first + count)."""

    run: Callable[[list, list, np.ndarray], None]
    code: CodeType
    first: int
    count: int
    programs: tuple = ()      # the native step programs it calls (steps.py)
    # a plan of one chunk: the same steps as ``call(arrays, per_step, arena)``, the plan's inputs in order in,
    # its outputs returned in order (a control-flow body's iteration: no slot list filled or read); for a body,
    # ``run`` is then this one function over the slot list (generate: one compiled copy, not two)
    call: Callable[[Sequence, list, np.ndarray, Sequence], list] | None = None
    call_code: CodeType | None = None
    # the bound steps (step, operand sources): a source is None (absent), (-1, constant) or (k, p, *views): output
    # p of step k, its planned buffer, through static views (see bind)
    binds: tuple[tuple[int, tuple], ...] = ()


def _store(buf: np.ndarray, result) -> np.ndarray:
    np.copyto(buf, result, casting="unsafe")
    return buf


def _fresh(bufs: list, fresh: tuple) -> list:
    bufs = list(bufs)
    for pos, shape, dtype in fresh:
        bufs[pos] = np.empty(shape, dtype)
    return bufs


def generate(steps: Sequence, slots: Sequence, outputs: Sequence[tuple[str, int]],
             arena: np.ndarray | None = None, inputs: Sequence[tuple[str, int]] | None = None) -> list[Chunk]:
    """The straight-line chunks of a plan. A run fills ``S = list(slots)`` with its inputs, calls every
    chunk as ``chunk.run(S, per_step, arena, B)`` in order (``B``: :func:`bind` of the chunks on that buffer
    set) and reads its outputs from ``S``.

    ``steps``: the plan's steps (run, ins, outs, buffers, fresh); ``slots``: the slot template (constants
    filled); ``arena``: the arena of the template buffers (None: no native step programs); ``inputs``: a
    control-flow body plan's, for the positional entry of a plan of one chunk (Chunk.call; None: none). Which
    outputs have a preallocated buffer, and where in the arena, is read from the steps' template buffers: every
    per-run buffer set has the same layout."""
    last_read = {idx: len(steps) for _, idx in outputs}   # graph outputs are read after every step
    for k, step in enumerate(steps):
        for i in step.ins:
            last_read[i] = max(last_read.get(i, -1), k)
    segments = _segments(steps, slots, arena) if arena is not None and native_steps.enabled() else {}
    fixed = _fixed_slots(steps, segments)
    if inputs is not None and len(steps) <= CHUNK:
        # NOTE: a body of one chunk is generated once, positional; its slot-list entry (a checked or profiled
        # run's fallback, Plan.run) is that function over the slot list, not a second compiled copy
        ins, outs = [idx for _, idx in inputs], [idx for _, idx in outputs]
        positional = _chunk(steps, slots, 0, len(steps), last_read, segments, fixed, (ins, outs))
        if positional is not None:
            return [replace(positional, run=_over_slots(positional.run, ins, outs), call=positional.run,
                            call_code=positional.code)]
    chunks = []
    for first in range(0, len(steps), CHUNK):
        chunks.append(_chunk(steps, slots, first, min(first + CHUNK, len(steps)), last_read, segments, fixed))
    return chunks


def _over_slots(call: Callable[[Sequence, list, np.ndarray, Sequence], list], ins: list[int], outs: list[int]) \
        -> Callable[[list, list, np.ndarray, Sequence], None]:
    """A positional chunk function as a slot-list one: its inputs read from ``S``, its outputs stored into it."""
    def run(S: list, per_step: list, arena: np.ndarray, B: Sequence) -> None:
        for i, r in zip(outs, call([S[i] for i in ins], per_step, arena, B)):
            S[i] = r

    return run


def binds_input(step) -> bool:
    """Whether the generated code runs ``step`` as a binding of its input (Identity: its output is its input; a
    static view, kernels/view.py: its input, or a block of it, reshaped; either a per-run copy when it is a graph
    output), so its planned buffer, if it has one, is never written."""
    return (isinstance(step.kernel, IdentityKernel) and len(step.ins) == 1 and step.outs[0] != 1) \
        or _view_of(step) is not None


def _view_of(step) -> tuple | None:
    """(shape, start, stop) of a static view step (its run function's ``view_of``, kernels/view.py), or None."""
    view = getattr(step.run, "view_of", None)
    if view is None or not step.ins or step.ins[0] == 0 or len(step.outs) != 1 or step.outs[0] == 1 \
            or not step.logical:
        return None
    return view


def _fixed_slots(steps: Sequence, segments: dict[int, tuple[int, object]]) -> dict[int, tuple]:
    """slot -> (k, p, *views) for every slot whose value in the generated code is always output p's planned buffer of
    step k (``per_step[k][p]`` of the run's buffer set), seen through the static views (shape, start, stop) of the
    view steps in between (an Identity's: none): what a kernel may bind to (see bind)."""
    fixed: dict[int, tuple] = {}
    segment_end, builder = -1, None
    for k, step in enumerate(steps):
        if k in segments:
            segment_end, builder = segments[k]
        if k < segment_end:         # a native step program's step (_segment_line)
            idx = step.outs[0]
            if step.fresh:
                continue
            if idx in builder.arena_of:
                fixed[idx] = (k, 0)
            elif step.ins and step.ins[0] in fixed:     # an alias of its input
                fixed[idx] = fixed[step.ins[0]]
            continue
        if binds_input(step):
            # its value is its input, or a view of it the line makes per run: fixed when the input is and the
            # view is one (of the template buffer, laid out as every set's) and not a copy
            src = fixed.get(step.ins[0])
            view = _view_of(step)
            if src is not None and not step.fresh:
                if view is None:
                    fixed[step.outs[0]] = src
                else:
                    base = steps[src[0]].buffers[src[1]]
                    if np.may_share_memory(_viewed(base, src[2:]), _viewed(base, src[2:] + (view,))):
                        fixed[step.outs[0]] = src + (view,)
            continue
        fresh = {p for p, _, _ in step.fresh}
        for p, (idx, buf) in enumerate(zip(step.outs, step.buffers)):
            if idx > 1 and buf is not None and p not in fresh:
                fixed[idx] = (k, p)     # written in place (or stored into its buffer) by every line kind below
    return fixed


def _bind_sources(step, slots: Sequence, fixed: dict[int, tuple]) -> tuple | None:
    """Where a bindable step's operands come from on every run (see Chunk.binds), or None when ``step`` cannot be
    bound: its run function has no ``bind``, an output is allocated per run or has no planned buffer, or an operand
    is a graph input or a tensor made per run."""
    if getattr(step.run, "bind", None) is None or step.fresh or not step.outs \
            or any(buf is None for idx, buf in zip(step.outs, step.buffers) if idx != 1):
        return None
    sources = []
    for i in step.ins:
        if i == 0:
            sources.append(None)
        elif slots[i] is not None:
            sources.append((-1, slots[i]))
        elif i in fixed:
            sources.append(fixed[i])
        else:
            return None
    return tuple(sources)


def bind(steps: Sequence, chunks: Sequence[Chunk], per_step: list[list]) -> list:
    """The bound calls of the chunks' bound steps on one buffer set (its ``per_step`` buffers), indexed by step: what
    the generated code calls as ``B[k]()``. Made under the thread split in force (parallel.py): the caller keys the
    list by it. A kernel whose ``bind`` declines gets its plain run over the same arrays."""
    bound: list = [None] * len(steps)
    scratch = SetScratch()
    for chunk in chunks:
        for k, sources in chunk.binds:
            ins = [None if src is None else src[1] if src[0] < 0 else _viewed(per_step[src[0]][src[1]], src[2:])
                   for src in sources]
            outs = list(per_step[k])
            step = steps[k]
            with wrapped(lambda exc: DeviceError(f"{where(step.node, 'cpu')}: binding kernel '{step.kernel_name}' "
                                                 f"failed: {type(exc).__name__}: {exc}"), passthrough=(MemoryError,)):
                fn = step.run.bind
                made = fn(ins, outs, scratch) if getattr(fn, "takes_scratch", False) else fn(ins, outs)
                bound[k] = made or _unbound(step.run, ins, outs)
    return bound


class SetScratch:
    """The scratch memory of one buffer set's bound calls (im2col columns, Winograd tiles), for a kernel whose
    ``bind`` has ``takes_scratch``: it is called as ``bind(inputs, outputs, scratch)``. A run on a set calls its
    bound steps one after another on one thread, so one buffer serves them all; it belongs to the set (and thread
    split) it was made for, never to the plan or to a thread, so two threads running one Session on two sets
    share none. A request larger than the buffer gets a new one: steps bound before keep the old one."""

    ALIGN = 64

    def __init__(self) -> None:
        self.buf: np.ndarray | None = None

    def arrays(self, *parts: tuple[tuple[int, ...], np.dtype]) -> list[np.ndarray]:
        """Arrays of the given (shape, dtype) laid one after another (each ALIGN-byte aligned) in the buffer."""
        sizes = [int(np.prod(shape, dtype=np.int64)) for shape, _ in parts]
        spans = [-(-n * np.dtype(dtype).itemsize // self.ALIGN) * self.ALIGN for n, (_, dtype) in zip(sizes, parts)]
        total = sum(spans)
        if self.buf is None or self.buf.nbytes < total + self.ALIGN:
            self.buf = np.empty(total + self.ALIGN, np.uint8)
        start = -self.buf.__array_interface__["data"][0] % self.ALIGN
        views = []
        for n, span, (shape, dtype) in zip(sizes, spans, parts):
            views.append(np.frombuffer(self.buf, dtype, n, start).reshape(shape))
            start += span
        return views


def _viewed(buf: np.ndarray, views: tuple) -> np.ndarray:
    """``buf`` seen through static views (shape, start, stop) as the generated lines of view steps make them."""
    for shape, start, stop in views:
        buf = (buf if start is None else buf.reshape(-1)[int(start):int(stop)]).reshape(shape)
    return buf


def _unbound(run, ins: list, outs: list) -> Callable[[], None]:
    """``run`` over the fixed ``ins`` into the planned ``outs``, stored there when it returned other arrays."""
    def call() -> None:
        for buf, r in zip(outs, run(ins, outs)):
            if buf is not None and r is not buf:
                np.copyto(buf, r, casting="unsafe")

    return call


def _segments(steps: Sequence, slots: Sequence, arena: np.ndarray) -> dict[int, tuple[int, object]]:
    """first step -> (stop, Builder) of each run of steps a native step program takes (never across a chunk)."""
    arena_of: dict[int, int] = {}       # slots always written into their arena buffer
    for step in steps:
        if binds_input(step):
            continue        # the generated line binds its input: its template buffer is never written
        fresh = {p for p, _, _ in step.fresh}
        for p, (idx, buf) in enumerate(zip(step.outs, step.buffers)):
            offset = native_steps.arena_offset(buf, arena) if p not in fresh and idx > 1 else None
            if offset is not None:
                arena_of[idx] = offset
    found: dict[int, tuple[int, object]] = {}
    k = 0
    while k < len(steps):
        builder, stop = None, k
        while stop < len(steps) and (stop == k or stop % CHUNK):
            desc = native_steps.describe(steps[stop], slots)
            if desc is None or (desc.op not in ("alias", "copy") and not steps[stop].fresh
                                and steps[stop].outs[0] not in arena_of):
                break
            builder = builder or native_steps.Builder(arena_of, slots)
            if not builder.fits(steps[stop], desc, bool(steps[stop].fresh)):
                break
            builder.add(steps[stop], desc, bool(steps[stop].fresh))
            stop += 1
        if builder is not None and builder.steps:
            found[k] = (stop, builder)
        k = max(stop, k + 1)
    return found


def _chunk(steps: Sequence, slots: Sequence, first: int, stop: int, last_read: dict[int, int],
           segments: dict[int, tuple[int, object]], fixed: dict[int, tuple],
           positional: tuple[list, list] | None = None) -> Chunk | None:
    """The chunk of steps [first, stop); ``positional`` (input slots, output slots): the whole plan's steps as
    ``call(A, per_step, arena)`` reading input k from A[k] and returning the outputs (None when a step reads a
    slot that is not an input)."""
    env: dict[str, object] = {"_store": _store, "_fresh": _fresh, "_empty": np.empty, "_asc": np.ascontiguousarray,
                              "_copy": np.array, "_f32": np.dtype(np.float32)}
    bound: list[str] = []
    defined: set[int] = set()
    loads: list[int] = []

    def name(i: int) -> str:
        if i == 0:
            return "None"
        if i == 1:
            return "_"
        if slots[i] is not None:
            if f"c{i}" not in env:
                env[f"c{i}"] = slots[i]
                bound.append(f"c{i}")
            return f"c{i}"
        if i not in defined and i not in loads:
            loads.append(i)      # made before this chunk (or a graph input): read from S
        return f"s{i}"

    body = []
    binds = []
    segment_end = first
    for k in range(first, stop):
        step = steps[k]
        if k in segments:
            segment_end, builder = segments[k]
            body.append(_segment_line(steps, k, segment_end, builder, env, bound, name, defined, last_read))
            continue
        if k < segment_end:
            body.append("    pass")
            continue
        if binds_input(step):
            # NOTE: Identity is its input (a declared view), a static view its input reshaped: no call; into a
            # graph output, one C-order copy
            src = name(step.ins[0])
            view = _view_of(step)
            if view is not None:
                env[f"v{k}"] = view[0]
                bound.append(f"v{k}")
                part = "" if view[1] is None else f".reshape(-1)[{int(view[1])}:{int(view[2])}]"
                src = f"{src}{part}.reshape(v{k})"
            defined.add(step.outs[0])
            body.append(f"    s{step.outs[0]} = _copy({src}, order='C')" if step.fresh else
                        f"    s{step.outs[0]} = {src}")
            continue
        gemm = _direct_gemm(step)
        if gemm is not None:
            # NOTE: a body's step GEMM: the prepared native call on the planned output, without the kernel's frame
            # (kernels/step_gemm.py; per iteration of a Loop or Scan), reshaped only where not matrices already
            env[f"g{k}"] = gemm[0]
            bound.append(f"g{k}")
            out, a = f"s{step.outs[0]}", f"_asc({name(step.ins[0])}, _f32)"
            k_, n_ = step.run.dims
            y = out
            if gemm[1]:
                a, y = f"{a}.reshape({gemm[2]}, {k_})", f"{out}.reshape({gemm[2]}, {n_})"
            if step.fresh:
                env[f"sh{k}"] = step.fresh[0][1]
                bound.append(f"sh{k}")
            made = f"_empty(sh{k}, _f32)" if step.fresh else f"per_step[{k}][0]"
            body.append(f"    {out} = {made}; g{k}.run({a}, {y}, 1, 1, False)")
            defined.add(step.outs[0])
            continue
        sources = _bind_sources(step, slots, fixed)
        if sources is not None:
            # NOTE: a bound step: one call of what its kernel bound on this buffer set (bind); its outputs are its
            # planned buffers, which later lines read
            binds.append((k, sources))
            parts = [f"B[{k}]()"]
            for p, idx in enumerate(step.outs):
                if idx != 1:
                    defined.add(idx)
                    parts.append(f"s{idx} = per_step[{k}][{p}]")
            body.append("    " + "; ".join(parts))
            continue
        direct = _direct_ufunc(step)
        env[f"f{k}"] = step.run if direct is None else direct
        bound.append(f"f{k}")
        args = ", ".join(name(i) for i in step.ins)
        if direct is not None:
            body.append(f"    s{step.outs[0]} = f{k}({args}, out=per_step[{k}][0])")
            defined.add(step.outs[0])
            continue
        if step.fresh:
            env[f"fr{k}"] = step.fresh
            bound.append(f"fr{k}")
        parts = [f"b = _fresh(per_step[{k}], fr{k})" if step.fresh else f"b = per_step[{k}]",
                 f"r = f{k}([{args}], b)"]
        has_buffer = {p for p, _, _ in step.fresh} | {p for p, buf in enumerate(step.buffers) if buf is not None}
        for p, idx in enumerate(step.outs):
            target = "_" if idx == 1 else f"s{idx}"
            defined.add(idx)
            if p in has_buffer:
                parts.append(f"{target} = r[{p}] if r[{p}] is b[{p}] else _store(b[{p}], r[{p}])")
            else:
                parts.append(f"{target} = r[{p}]")
        body.append("    " + "; ".join(parts))
    stores = [i for i in sorted(defined) if i > 1 and last_read.get(i, -1) >= stop]
    if positional is not None:
        ins, outs = positional
        returned = ", ".join(name(i) for i in outs)
        if any(i not in ins for i in loads):
            return None
        source = [f"s{i} = A[{ins.index(i)}]" for i in loads]
        tail = f"    return [{returned}]"
    else:
        source = [f"s{i} = S[{i}]" for i in loads]
        tail = "    " + "; ".join(f"S[{i}] = s{i}" for i in stores) if stores else ""
    # the bindings and the loads share line 2, so step k sits on line FIRST_STEP_LINE + (k - first)
    setup = ([f"{', '.join(bound)}, = _bound"] if bound else []) + source
    head = "def run(A, per_step, arena, B):" if positional is not None else "def run(S, per_step, arena, B):"
    lines = [head, "    " + "; ".join(setup or ["pass"])] + body
    if tail:
        lines.append(tail)
    env["_bound"] = tuple(env[n] for n in bound)
    code = _compiled("\n".join(lines) + "\n", f"<nnhal cpu plan, steps {first}-{stop - 1}>")
    exec(code, env)   # noqa: S102 - the source is built above from slot numbers and names nnhal chose
    fn = env["run"]
    programs = tuple(env[f"P{k}"] for k in range(first, stop) if f"P{k}" in env)
    return Chunk(fn, fn.__code__, first, stop - first, programs, binds=tuple(binds))


@functools.lru_cache(maxsize=256)
def _compiled(source: str, filename: str):
    """The code object of ``source`` (immutable: each exec makes its own function in its own namespace).
    NOTE: cached because every prepare of another input shape of one model generates the same sources (a
    decode step's per-token prepare compiled them anew, ~1.5 ms)."""
    return compile(source, filename, "exec")


def _segment_line(steps: Sequence, first: int, stop: int, builder, env: dict, bound: list, name, defined: set,
                  last_read: dict[int, int]) -> str:
    """The source line running steps [first, stop) as one native step program, then binding as locals the
    outputs read after ``stop``."""
    program = f"P{first}"
    env[program] = builder.program()
    bound.append(program)
    parts = []
    made: dict[int, str] = {}       # slot -> expression of its value after the program ran
    for k in range(first, stop):
        step = steps[k]
        idx = step.outs[0]
        if step.fresh:
            _, shape, dtype = step.fresh[0]
            env[f"sh{k}"], env[f"dt{k}"] = shape, dtype
            bound.extend((f"sh{k}", f"dt{k}"))
            parts.append(f"s{idx} = _empty(sh{k}, dt{k})")
            made[idx] = f"s{idx}"
            defined.add(idx)
        elif idx in builder.arena_of:
            made[idx] = f"per_step[{k}][0]"
        else:           # an alias of its input
            src = step.ins[0]
            made[idx] = made[src] if src in made else name(src)
    # NOTE: an input from outside (a graph input, another kernel's result) may be a strided view: the program
    # takes C-contiguous float32 only, and np.ascontiguousarray returns an array that already is one as it is
    args = "".join(f"{made[i]}, " if i in made else f"_asc({name(i)}, _f32), " for i in builder.dynamic)
    parts.append(f"{program}.run(arena, ({args}))")
    for k in range(first, stop):
        idx = steps[k].outs[0]
        if last_read.get(idx, -1) >= stop and made[idx] != f"s{idx}":
            parts.append(f"s{idx} = {made[idx]}")
            defined.add(idx)
    return "    " + "; ".join(parts)


def _direct_ufunc(step):
    """The ufunc a step's run function stands for (kernels/base.py ufunc_run), when its output is preallocated."""
    ufunc = getattr(step.run, "ufunc", None)
    if ufunc is None or step.fresh or len(step.outs) != 1 or step.buffers[0] is None \
            or ufunc.nin != len(step.ins) or 0 in step.ins or step.outs[0] == 1:
        return None
    if step.buffers[0].size >= 2 * parallel.MIN_PART_WORK:
        return parallel.elementwise(ufunc)     # split over the pool when it runs (device/cpu/parallel.py)
    return ufunc


def _direct_gemm(step):
    """(gemm, reshape, rows): the prepared native GEMM a step's run function stands for (kernels/step_gemm.py),
    when its input A is float32 of a static shape (..., k) and its output a planned C-contiguous float32 buffer (or
    one allocated per run, a graph output's) of (..., n) with as many rows; ``reshape``: either is not a matrix
    (the call passes (rows, k) and (rows, n) views). None otherwise."""
    gemm = getattr(step.run, "gemm", None)
    if gemm is None or len(step.outs) != 1 or step.outs[0] == 1 or not step.ins or step.ins[0] == 0 \
            or not step.inputs:
        return None     # the other inputs (B, C, a bias) are the constants the GEMM was prepared with
    k, n = step.run.dims
    info, buf = step.inputs[0], step.buffers[0]
    if step.fresh:      # a graph output allocated per run: a new C-contiguous array, as the kernel's run makes
        (pos, shape, dtype), = step.fresh
        if pos != 0 or np.dtype(dtype) != np.float32:
            return None
        buf = np.empty(shape, np.float32)
    if info is None or info.dtype != np.float32 or not info.static or not info.shape or buf is None \
            or buf.dtype != np.float32 or not buf.flags.c_contiguous or not buf.ndim or buf.shape[-1] != n \
            or info.shape[-1] != k:
        return None
    rows = int(np.prod(buf.shape[:-1], dtype=np.int64))
    if rows != int(np.prod(info.shape[:-1], dtype=np.int64)):
        return None
    return gemm, (len(info.shape) != 2 or buf.ndim != 2), rows


def failing_step(exc: BaseException, chunks: Sequence[Chunk]) -> int | None:
    """The step whose line of a generated chunk raised ``exc``, or None when it did not come from one."""
    codes = {c.code: c for c in chunks} | {c.call_code: c for c in chunks if c.call_code is not None}
    tb = exc.__traceback__
    found = None
    while tb is not None:
        chunk = codes.get(tb.tb_frame.f_code)
        if chunk is not None:
            found = (chunk, tb.tb_lineno)
        tb = tb.tb_next
    if found is None:
        return None
    chunk, line = found
    step = line - FIRST_STEP_LINE
    return chunk.first + step if 0 <= step < chunk.count else None
