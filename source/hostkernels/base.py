"""The host kernel contract.

A kernel implements one op. ``prepare`` runs once at pre_run with what
inference knows (dtype, shape and, for constants, the value of every input)
and returns the run function; the run function runs many times:

    run(inputs, outputs) -> sequence of output arrays

``inputs`` holds one array per node input (None for an absent optional
input). ``outputs`` holds one preallocated array per output when its shape is
static, else None; a kernel writes into the preallocated array (``out=``) or
returns a new one where it is None. Several implementations of one op may
coexist; ``score`` says how well one fits a node (0 = cannot run it) and the
highest score wins.

A run function may carry the attribute ``ufunc`` (see ``ufunc_run``): it promises that, whenever its one
output is preallocated, ``run(inputs, outputs)`` is exactly ``(ufunc(*inputs, out=outputs[0]),)``; the
plan then calls the ufunc itself and skips a call layer per node.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from nnhal.graph.node import Node
from nnhal.operator.base import Info

RunFn = Callable[[list, list], Sequence[np.ndarray]]


class Kernel:
    """Base of every host kernel."""

    op_type: ClassVar[str]
    name: ClassVar[str] = "reference"
    # output index -> input index whose buffer the output may reuse when that
    # input dies at this node (same size and dtype): elementwise ops.
    inplace: ClassVar[dict[int, int]] = {}
    # output index -> input index the output is a view of (Reshape, Squeeze...):
    # the planner allocates nothing for it and keeps the input's buffer alive.
    view: ClassVar[dict[int, int]] = {}
    # True: the run function writes output 0 correctly into a slice of the last axis of a wider C-contiguous
    # tensor (a channel slice of a channels-last Concat output, (N, H, W, C) with pixels further apart than
    # C), which the CPU planner then hands it as its preallocated output (plan.concat_slices); a kernel whose
    # paths differ by node answers per node with a method strided_output_for(node, ins, outs) instead
    strided_output: ClassVar[bool] = False
    # the inputs (by index) the run function reads from such a channel slice (a view with the wider tensor's
    # strides) without first copying it to a contiguous array: the CPU planner places a tensor inside a
    # Concat's output when all its other readers are here (plan.concat_slices)
    strided_input: ClassVar[frozenset[int]] = frozenset()
    # the memory layout of input 0 and output 0 this implementation runs on: None = the ONNX layout
    # (NCHW); "NHWC" = channels last. A channels-last kernel is chosen only for nodes the CPU layout
    # pass (device/cpu/layout.py) puts in NHWC; its prepare still gets the ONNX (NCHW) shapes in ``ins``
    # and ``outs``, its run gets input 0 as an (N, H, W, C) array and writes output 0 as (N, OH, OW, M).
    layout: ClassVar[str | None] = None

    def score(self, node: Node, ins: list[Info | None], outs: list[Info]) -> int:
        """How well this implementation fits the node; 0 means it cannot run it."""
        return 1

    def prepare(self, node: Node, ins: list[Info | None], outs: list[Info]) -> RunFn:
        """Pack weights and plan buffers once; return the run function."""
        raise NotImplementedError(f"{type(self).__name__}.prepare")


class FunctionKernel(Kernel):
    """A kernel written as a pure function: ``compute(node, *inputs) -> array or tuple``.

    The base stores each result into the preallocated output (or returns it,
    converted to the inferred dtype). Most kernels need nothing more.
    """

    def compute(self, node: Node, *inputs: np.ndarray | None) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.compute")

    def prepare(self, node: Node, ins: list[Info | None], outs: list[Info]) -> RunFn:
        dtypes = [o.dtype for o in outs]
        compute = self.compute
        single = len(outs) == 1

        def run(inputs: list, outputs: list) -> Sequence[np.ndarray]:
            result = compute(node, *inputs)
            if single and not isinstance(result, (tuple, list)):
                return (store(result, outputs[0], dtypes[0]),)
            return tuple(store(r, o, d) for r, o, d in zip(result, outputs, dtypes))

        return run


def checking() -> bool:
    """NNHAL_CHECK=1 makes every run verify kernel outputs against inference. Read at prepare: the cpu device
    once per plan (cpu_pre_run, at a Session's prerun), the If, Loop and Scan kernels once per node; a plan
    prepared without it runs unchecked even if it is set later."""
    return os.environ.get("NNHAL_CHECK", "") not in ("", "0")


def ufunc_run(run: RunFn, ufunc: Any) -> RunFn:
    """Mark ``run`` as equivalent to ``ufunc`` into a preallocated output (when ``ufunc`` is a numpy ufunc)."""
    if isinstance(ufunc, np.ufunc):
        run.ufunc = ufunc    # type: ignore[attr-defined]
    return run


def store(result: Any, out: np.ndarray | None, dtype: np.dtype | None = None) -> np.ndarray:
    """Put ``result`` into the preallocated ``out`` (or return it as an array of ``dtype``)."""
    if out is None:
        array = np.asarray(result)
        if dtype is not None and array.dtype != dtype:
            array = array.astype(dtype)
        return array
    if result is not out:
        np.copyto(out, result, casting="unsafe")
    return out
