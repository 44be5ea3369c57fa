"""Loop on the CPU: run the body's compiled plan per iteration (cached per carried shapes)."""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from nnhal.errors import ShapeError, where
from nnhal.hostkernels._qrc import BodyRunner, check_bool, outer_values, own
from nnhal.hostkernels.base import Kernel, RunFn, checking, store
from nnhal.hostkernels.graphrun import Compiler

_TRUE, _FALSE = np.array(True), np.array(False)
_TRUE.flags.writeable = _FALSE.flags.writeable = False


class LoopKernel(Kernel):
    op_type = "Loop"
    # the compiler of its bodies; None = the host one (graphrun.compile_nodes); a device sets its own
    compiler: ClassVar[Compiler | None] = None

    def prepare(self, node, ins, outs) -> RunFn:
        runner = BodyRunner(node.attrs["body"], node.implicit_inputs, self.compiler)
        n = max(0, len(node.inputs) - 2)
        has_m = bool(node.input(0))
        has_cond = bool(node.input(1))
        dtypes = [o.dtype for o in outs]
        empty_shapes = [_empty_shape(o.shape) for o in outs[n:]]

        def run(inputs, outputs):
            trips = int(np.asarray(inputs[0]).reshape(())) if has_m else None
            go = check_bool(node, inputs[1], "cond") if has_cond else True
            state = list(inputs[2:2 + n])
            outer = outer_values(node, inputs)
            implicit = [outer[name] for name in runner.implicit]
            scans: list[list[np.ndarray]] = [[] for _ in empty_shapes]
            check = checking()
            call = runner.call
            i = 0
            # NOTE: per iteration only the counter is a new array: the body never writes its inputs, so the
            # condition is one of two read-only constants
            while go and (trips is None or i < trips):
                results = call([np.array(i, np.int64), _TRUE if go else _FALSE, *state, *implicit], check)
                if has_cond:
                    go = check_bool(node, results[0], "the body's cond output")
                state = results[1:1 + n]
                for acc, r in zip(scans, results[1 + n:]):
                    acc.append(r)
                i += 1
            finals = [own(s) for s in state]
            for acc, shape, dtype in zip(scans, empty_shapes, dtypes[n:]):
                finals.append(_stack(node, acc, shape, dtype))
            return tuple(store(r, o, d) for r, o, d in zip(finals, outputs, dtypes))

        return run


def _empty_shape(shape: tuple | None) -> tuple:
    """The shape of a scan output after zero iterations: unknown dims count as 0."""
    if shape is None:
        return (0,)
    return (0,) + tuple(d or 0 for d in shape[1:])


def _stack(node, parts: list[np.ndarray], empty: tuple, dtype) -> np.ndarray:
    if not parts:
        return np.zeros(empty, dtype or np.float32)
    if any(p.shape != parts[0].shape for p in parts):
        raise ShapeError(f"{where(node)}: scan output shapes differ across iterations: "
                         f"{sorted({p.shape for p in parts})}")
    return np.stack(parts)


IMPLEMENTATIONS = (LoopKernel,)
