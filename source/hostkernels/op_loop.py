"""Loop on the CPU: run the body's compiled plan per iteration (cached per carried shapes)."""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from nnhal.hostkernels._qrc import BodyRunner, Stacked, check_bool, outer_values, own
from nnhal.hostkernels.base import Kernel, RunFn, checking, store
from nnhal.hostkernels.graphrun import Compiler

_TRUE, _FALSE = np.array(True), np.array(False)
_TRUE.flags.writeable = _FALSE.flags.writeable = False
_COUNTED = 4096
_COUNTERS: list[np.ndarray] = []    # read-only iteration numbers 0, 1, ... made once, shared by every Loop


def _counters(trips: int | None) -> list[np.ndarray]:
    """The shared iteration numbers, extended to ``trips`` when known (at most _COUNTED; later ones are made per
    iteration).
    NOTE: extended under the GIL by appends only, so a concurrent run reads a list that is only ever longer."""
    want = len(_COUNTERS) if trips is None else min(trips, _COUNTED)
    for i in range(len(_COUNTERS), want):
        counter = np.array(i, np.int64)
        counter.flags.writeable = False
        _COUNTERS.append(counter)
    return _COUNTERS


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
        check = checking()    # NOTE: NNHAL_CHECK read once at prepare, not per node run

        def run(inputs, outputs):
            trips = int(np.asarray(inputs[0]).reshape(())) if has_m else None
            go = check_bool(node, inputs[1], "cond") if has_cond else True
            state = list(inputs[2:2 + n])
            outer = outer_values(node, inputs)
            implicit = [outer[name] for name in runner.implicit]
            # NOTE: without a condition the loop runs exactly ``trips`` times: its scan outputs are written in
            # place (the planned outputs when they fit), else kept and stacked at the end
            count = trips if has_m and not has_cond else None
            scans = [Stacked(node, o, count) for o in outputs[n:]]
            counters = _counters(trips)
            counted = len(counters)
            iterations = runner.iterations()
            call = iterations.call
            i = 0
            try:
                # NOTE: per iteration no new array: the body never writes its inputs, so the counter and the
                # condition are shared read-only constants
                while go and (trips is None or i < trips):
                    counter = counters[i] if i < counted else np.array(i, np.int64)
                    results = call([counter, _TRUE if go else _FALSE, *state, *implicit], check)
                    if has_cond:
                        # NOTE: a body passing its condition through returns the shared _TRUE: no conversion
                        cond = results[0]
                        go = cond is _TRUE or check_bool(node, cond, "the body's cond output")
                    state = results[1:1 + n]
                    for acc, r in zip(scans, results[1 + n:]):
                        acc.add(r)
                    i += 1
                # the body's outputs live in its buffers until close: copies (own) or stores into the outputs
                finals = [own(s) if o is None else store(s, o, d) for s, o, d in zip(state, outputs, dtypes)]
            finally:
                iterations.close()
            finals += [acc.result(shape, dtype) for acc, shape, dtype in zip(scans, empty_shapes, dtypes[n:])]
            return tuple(store(r, o, d) for r, o, d in zip(finals, outputs, dtypes))

        return run


def _empty_shape(shape: tuple | None) -> tuple:
    """The shape of a scan output after zero iterations: unknown dims count as 0."""
    if shape is None:
        return (0,)
    return (0,) + tuple(d or 0 for d in shape[1:])


IMPLEMENTATIONS = (LoopKernel,)
