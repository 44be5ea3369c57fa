"""Scan on the CPU: run the body's compiled plan per slice (compiled once per shapes)."""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from nnhal.errors import ShapeError, where
from nnhal.hostkernels._qrc import BodyRunner, Stacked, outer_values, own
from nnhal.hostkernels.base import Kernel, RunFn, checking, store
from nnhal.hostkernels.graphrun import Compiler


class ScanKernel(Kernel):
    op_type = "Scan"
    # the compiler of its bodies; None = the host one (graphrun.compile_nodes); a device sets its own
    compiler: ClassVar[Compiler | None] = None

    def prepare(self, node, ins, outs) -> RunFn:
        runner = BodyRunner(node.attrs["body"], node.implicit_inputs, self.compiler)
        first = 1 if node.version == 8 else 0
        m = node.attrs["num_scan_inputs"]
        n = len(node.inputs) - first - m
        k = len(node.outputs) - n
        dtypes = [o.dtype for o in outs]
        check = checking()    # NOTE: NNHAL_CHECK read once at prepare, not per node run
        if node.version == 8:
            in_dirs = node.attrs["directions"] or [0] * m
            in_axes, out_dirs, out_axes = [0] * m, [0] * k, [0] * k
        else:
            in_dirs = node.attrs["scan_input_directions"] or [0] * m
            in_axes = node.attrs["scan_input_axes"] or [0] * m
            out_dirs = node.attrs["scan_output_directions"] or [0] * k
            out_axes = node.attrs["scan_output_axes"] or [0] * k

        def scan(states: list, seqs: list, outer: dict, length: int | None = None,
                 planned: list | None = None) -> list[np.ndarray]:
            """One unbatched scan: final states then stacked scan outputs (written in place into ``planned``,
            the node's preallocated outputs, where they fit)."""
            axes = [a % x.ndim for a, x in zip(in_axes, seqs)]
            lengths = {x.shape[a] for x, a in zip(seqs, axes)}
            if len(lengths) != 1:
                raise ShapeError(f"{where(node)}: scan inputs have different sequence lengths {sorted(lengths)}")
            total = lengths.pop()
            steps = total if length is None else min(length, total)
            planned = planned or [None] * k
            collected = [Stacked(node, planned[j], steps, out_axes[j], bool(out_dirs[j])) for j in range(k)]
            implicit = [outer[name] for name in runner.implicit]
            iterations = runner.iterations()
            call = iterations.call
            try:
                for slices in _steps(seqs, axes, in_dirs, steps):
                    results = call([*states, *slices, *implicit], check)
                    states = results[:n]
                    for acc, r in zip(collected, results[n:]):
                        acc.add(r)
                finals = [own(s) for s in states]    # the body's outputs live in its buffers until close
            finally:
                iterations.close()
            for j, acc in enumerate(collected):
                shape = outs[n + j].shape
                finals.append(acc.result((0,) * (len(shape) if shape is not None else 1), dtypes[n + j]))
            return finals

        def run(inputs, outputs):
            states = list(inputs[first:first + n])
            seqs = list(inputs[first + n:first + n + m])
            outer = outer_values(node, inputs)
            if node.version == 8:
                finals = _batched(scan, inputs[0], states, seqs, outer, n, k)
            else:
                finals = scan(states, seqs, outer, planned=list(outputs[n:]))
            return tuple(store(r, o, d) for r, o, d in zip(finals, outputs, dtypes))

        return run


def _steps(seqs: list, axes: list, dirs: list, steps: int):
    """Per step, the slices of the scan inputs in order: views of axis 0 (the body never writes its inputs), made
    for every step at once when every input scans axis 0; a slice of another axis is copied."""
    if all(a == 0 for a in axes):
        return zip(*[list(x[:steps][::-1] if d else x[:steps]) for x, d in zip(seqs, dirs)])
    return ([(x[steps - 1 - t if d else t] if a == 0 else np.take(x, steps - 1 - t if d else t, axis=a))
             for x, a, d in zip(seqs, axes, dirs)] for t in range(steps))


def _batched(scan, lens, states: list, seqs: list, outer: dict, n: int, k: int) -> list[np.ndarray]:
    """Scan-8: scan every batch entry (axis 0) separately, up to its sequence length."""
    batch = (states + seqs)[0].shape[0]
    per_batch = []
    for b in range(batch):
        length = None if lens is None else int(np.asarray(lens).reshape(-1)[b])
        per_batch.append(scan([s[b] for s in states], [x[b] for x in seqs], outer, length))
    total = seqs[0].shape[1]
    result = [np.stack([pb[i] for pb in per_batch]) for i in range(n)]
    for j in range(k):
        parts = [pb[n + j] for pb in per_batch]
        # NOTE: a shorter sequence's scan output is zero-padded to the full length.
        padded = [np.concatenate([p, np.zeros((total - p.shape[0],) + p.shape[1:], p.dtype)]) for p in parts]
        result.append(np.stack(padded))
    return result


IMPLEMENTATIONS = (ScanKernel,)
