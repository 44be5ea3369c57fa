"""Straight-line run functions for CPU plans: the per-node framework cost of a run, made small.

A plan's steps never change after pre_run, so instead of interpreting them (a loop that reads each step's
record, gathers its inputs by slot index and stores its outputs back) the plan generates, once, Python
functions whose bodies are the steps unrolled: every tensor a local variable, every kernel's run function
and constant a local bound once per call, one source line per step. Steps go in chunks of CHUNK per
function (CPython compiles one huge function in more than linear time); tensors that cross a chunk
boundary pass through the run's slot list. Per node, no dict lookup, no loop bookkeeping and no allocation
beyond the kernel's argument list happen. Source lines map back to steps, so a failing kernel is still
reported with its node. Profiling (per-step timings) and NNHAL_CHECK keep the interpreting loop.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import CodeType

import numpy as np

from nnhal.device.cpu import parallel

CHUNK = 256           # steps per generated function
FIRST_STEP_LINE = 3   # line of a chunk's first step (after the def line and the bindings line)


@dataclass(frozen=True)
class Chunk:
    """One generated function ``run(S, per_step)`` over steps [first, first + count)."""

    run: Callable[[list, list], None]
    code: CodeType
    first: int
    count: int


def _store(buf: np.ndarray, result) -> np.ndarray:
    np.copyto(buf, result, casting="unsafe")
    return buf


def _fresh(bufs: list, fresh: tuple) -> list:
    bufs = list(bufs)
    for pos, shape, dtype in fresh:
        bufs[pos] = np.empty(shape, dtype)
    return bufs


def generate(steps: Sequence, slots: Sequence, outputs: Sequence[tuple[str, int]]) -> list[Chunk]:
    """The straight-line chunks of a plan. A run fills ``S = list(slots)`` with its inputs, calls every
    chunk as ``chunk.run(S, per_step)`` in order and reads its outputs from ``S``.

    ``steps``: the plan's steps (run, ins, outs, buffers, fresh); ``slots``: the slot template (constants
    filled). Which outputs have a preallocated buffer is read from the steps' template buffers: every
    per-run buffer set has the same layout."""
    last_read = {idx: len(steps) for _, idx in outputs}   # graph outputs are read after every step
    for k, step in enumerate(steps):
        for i in step.ins:
            last_read[i] = max(last_read.get(i, -1), k)
    chunks = []
    for first in range(0, len(steps), CHUNK):
        chunks.append(_chunk(steps, slots, first, min(first + CHUNK, len(steps)), last_read))
    return chunks


def _chunk(steps: Sequence, slots: Sequence, first: int, stop: int, last_read: dict[int, int]) -> Chunk:
    env: dict[str, object] = {"_store": _store, "_fresh": _fresh}
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
    for k in range(first, stop):
        step = steps[k]
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
    # the bindings and the loads share line 2, so step k sits on line FIRST_STEP_LINE + (k - first)
    setup = ([f"{', '.join(bound)}, = _bound"] if bound else []) + [f"s{i} = S[{i}]" for i in loads]
    lines = ["def run(S, per_step):", "    " + "; ".join(setup)] + body
    if stores:
        lines.append("    " + "; ".join(f"S[{i}] = s{i}" for i in stores))
    env["_bound"] = tuple(env[n] for n in bound)
    code = compile("\n".join(lines) + "\n", f"<nnhal cpu plan, steps {first}-{stop - 1}>", "exec")
    exec(code, env)   # noqa: S102 - the source is built above from slot numbers and names nnhal chose
    fn = env["run"]
    return Chunk(fn, fn.__code__, first, stop - first)


def _direct_ufunc(step):
    """The ufunc a step's run function stands for (kernels/base.py ufunc_run), when its output is preallocated."""
    ufunc = getattr(step.run, "ufunc", None)
    if ufunc is None or step.fresh or len(step.outs) != 1 or step.buffers[0] is None \
            or ufunc.nin != len(step.ins) or 0 in step.ins or step.outs[0] == 1:
        return None
    if step.buffers[0].size >= 2 * parallel.MIN_PART_WORK:
        return parallel.elementwise(ufunc)     # split over the pool when it runs (device/cpu/parallel.py)
    return ufunc


def failing_step(exc: BaseException, chunks: Sequence[Chunk]) -> int | None:
    """The step whose line of a generated chunk raised ``exc``, or None when it did not come from one."""
    codes = {c.code: c for c in chunks}
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
