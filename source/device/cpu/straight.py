"""Straight-line run functions for CPU plans: the per-node framework cost of a run, made small.

A plan's steps never change after pre_run, so instead of interpreting them (a loop that reads each step's
record, gathers its inputs by slot index and stores its outputs back) the plan generates, once, one Python
function whose body is the steps unrolled: every tensor a local variable, every kernel's run function and
constant a local bound once per call, one source line per step. A run is then one call of that function
with the run's own buffers; no dict lookup, no loop bookkeeping and no allocation beyond the kernel's
argument list happen per node. Source lines map back to steps, so a failing kernel is still reported with
its node. Profiling (per-step timings) and NNHAL_CHECK keep the interpreting loop.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from types import CodeType

import numpy as np

FIRST_STEP_LINE = 3   # line of step 0 in the generated source (after the def line and the bindings line)


def _store(buf: np.ndarray, result) -> np.ndarray:
    np.copyto(buf, result, casting="unsafe")
    return buf


def _fresh(bufs: list, fresh: tuple) -> list:
    bufs = list(bufs)
    for pos, shape, dtype in fresh:
        bufs[pos] = np.empty(shape, dtype)
    return bufs


def generate(steps: Sequence, slots: Sequence, inputs: Sequence[tuple[str, int]],
             outputs: Sequence[tuple[str, int]]) -> tuple[Callable[[dict, list], None], CodeType]:
    """The straight-line function ``run(values, per_step)`` of a plan, and its code object.

    ``steps``: the plan's steps (run, ins, outs, buffers, fresh); ``slots``: the slot template (constants
    filled). Which outputs have a preallocated buffer is read from the steps' template buffers: every
    per-run buffer set has the same layout."""
    env: dict[str, object] = {"_store": _store, "_fresh": _fresh}
    bound: list[str] = []
    direct = [_direct_ufunc(step) for step in steps]
    for k, step in enumerate(steps):
        env[f"f{k}"] = step.run if direct[k] is None else direct[k]
        bound.append(f"f{k}")
        if step.fresh:
            env[f"fr{k}"] = step.fresh
            bound.append(f"fr{k}")
    names = ["None", "_"]
    for i in range(2, len(slots)):
        if slots[i] is None:
            names.append(f"s{i}")
        else:
            names.append(f"c{i}")
            env[f"c{i}"] = slots[i]
            bound.append(f"c{i}")
    # the bindings and the inputs share line 2, so step k sits on line FIRST_STEP_LINE + k
    setup = [f"{', '.join(bound)}, = _bound"] if bound else []
    setup += [f"{names[idx]} = values[{name!r}]" for name, idx in inputs]
    lines = ["def run(values, per_step):", "    " + ("; ".join(setup) or "pass")]
    for k, step in enumerate(steps):
        args = ", ".join(names[i] for i in step.ins)
        if direct[k] is not None:
            lines.append(f"    {names[step.outs[0]]} = f{k}({args}, out=per_step[{k}][0])")
            continue
        parts = [f"b = _fresh(per_step[{k}], fr{k})" if step.fresh else f"b = per_step[{k}]",
                 f"r = f{k}([{args}], b)"]
        has_buffer = {p for p, _, _ in step.fresh} | {p for p, buf in enumerate(step.buffers) if buf is not None}
        for p, idx in enumerate(step.outs):
            if p in has_buffer:
                parts.append(f"{names[idx]} = r[{p}] if r[{p}] is b[{p}] else _store(b[{p}], r[{p}])")
            else:
                parts.append(f"{names[idx]} = r[{p}]")
        lines.append("    " + "; ".join(parts))
    lines += [f"    values[{name!r}] = {names[idx]}" for name, idx in outputs]
    env["_bound"] = tuple(env[n] for n in bound)
    code = compile("\n".join(lines) + "\n", "<nnhal cpu plan>", "exec")
    exec(code, env)   # noqa: S102 - the source is built above from slot numbers and names nnhal chose
    fn = env["run"]
    return fn, fn.__code__


def _direct_ufunc(step):
    """The ufunc a step's run function stands for (kernels/base.py ufunc_run), when its output is preallocated."""
    ufunc = getattr(step.run, "ufunc", None)
    if ufunc is None or step.fresh or len(step.outs) != 1 or step.buffers[0] is None \
            or ufunc.nin != len(step.ins) or 0 in step.ins:
        return None
    return ufunc


def failing_step(exc: BaseException, code: CodeType) -> int | None:
    """The step whose line of the generated function raised ``exc``, or None when it did not come from there."""
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if tb.tb_frame.f_code is code:
            line = tb.tb_lineno
        tb = tb.tb_next
    return None if line is None else line - FIRST_STEP_LINE
