"""A control-flow body's small products as one prepared native GEMM call each.

A Loop or Scan body runs its MatMul and Gemm nodes once per iteration on one step's rows: an LSTM step's
output layer (1x64 times 64x1), a GRU cell's gates (1x64 times 64x192). There BLAS takes a microsecond or
two, and the framework around it (the pool's split decision, the BLAS-matrix checks, the epilogue and the
activation as separate calls) took ten. These kernels prepare a ``native.Gemm`` of the constant B with its
bias and fused activation once and run it directly, unsplit: act(A @ B + bias) in one native call.

Only a body's plan chooses them (kernels.select with ``body=True``; control.plan_iteration_body): a main graph's
products keep the pooled kernels, whose thread choice the plan makes (cpu_device.cpu_pre_run).
"""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu import native
from nnhal.device.cpu.kernels.gemm import GemmPooled
from nnhal.device.cpu.kernels.matmul import MatMulFast
from nnhal.hostkernels.base import RunFn
from nnhal.hostkernels.fused import activation_of, epilogue_of
from nnhal.operator.base import Info

# products of at most this many multiply-adds: one part whatever the threads (a split would cost more than it
# saves), and a single BLAS thread inside OpenBLAS's own gemm and gemv (its thresholds are higher)
STEP_MACS = 16 * 1024


def _static(info: Info | None) -> tuple | None:
    if info is None or info.shape is None or not all(isinstance(d, int) for d in info.shape):
        return None
    return tuple(info.shape)


def _small(a: Info | None, w: np.ndarray | None, out: Info) -> bool:
    """A float32 product of a runtime A by a constant float32 matrix W, small and of static shapes."""
    a_shape, shape = _static(a), _static(out)
    if a_shape is None or shape is None or not shape or out.dtype != np.float32 or a.dtype != np.float32:
        return False
    if not isinstance(w, np.ndarray) or w.ndim != 2 or w.dtype != np.float32 or not native.available():
        return False
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    return len(a_shape) >= 1 and a_shape[-1] == w.shape[0] and shape[-1] == w.shape[1] \
        and rows * w.shape[0] * w.shape[1] <= STEP_MACS


def _act(node):
    """The native record of the activation fused into ``node`` (none: the identity)."""
    act = activation_of(node)
    if act is None:
        return native.make_act(None)
    lo = None if act.lo is None else float(act.lo)
    hi = None if act.hi is None else float(act.hi)
    return native.make_act(act.kind, lo, hi, act.alpha, act.beta)


def _run(gemm, k: int, n: int, shape: tuple) -> RunFn:
    """act(A @ B + bias) by the prepared ``gemm``, into the planned output (or a new one)."""

    def run(inputs, outputs):
        y = outputs[0]
        if y is None or not y.flags.c_contiguous:
            y = np.empty(shape, np.float32)     # the plan copies it into a strided planned output
        a = np.ascontiguousarray(inputs[0], np.float32)
        gemm.run(a.reshape(-1, k), y.reshape(-1, n), 1, 1, False)
        return (y,)

    # the straight-line code calls ``gemm`` itself where the step's operands are matrices (straight.py)
    run.gemm, run.dims = gemm, (k, n)
    return run


class MatMulStep(MatMulFast):
    """MatMul by a constant matrix, with at most a constant bias and a fused activation, as one prepared
    native GEMM (a body's step); any other fused epilogue: the fast kernel."""

    name = "step-gemm"
    strided_output = False          # the native GEMM writes a C-contiguous output

    def score(self, node, ins, outs) -> int:
        return 3 if len(ins) > 1 and ins[1] is not None and _small(ins[0], ins[1].value, outs[0]) else 0

    def prepare(self, node, ins, outs) -> RunFn:
        w = ins[1].value
        bias = _bias(node, ins, w.shape[1])
        if bias is False:
            return super().prepare(node, ins, outs)
        gemm = native.Gemm(np.ascontiguousarray(w), bias, _act(node))     # row major: see GemmStep
        return _run(gemm, w.shape[0], w.shape[1], _static(outs[0]))


def _bias(node, ins, n: int) -> np.ndarray | None | bool:
    """The constant float32 bias of width ``n`` a MatMul's fused epilogue adds (None: no epilogue); False when
    the epilogue is anything else."""
    epilogue = epilogue_of(node)
    if not epilogue:
        return None
    if len(epilogue) > 1 or epilogue[0].op != "Add":
        return False
    operand = ins[epilogue[0].input]
    v = operand.value if operand is not None else None
    if v is None or v.dtype != np.float32 or v.size != n or v.shape[-1] != n:
        return False
    return np.ascontiguousarray(v.reshape(-1))


class GemmStep(GemmPooled):
    """Gemm of a runtime A (not transposed) by a constant B, with a constant C of B's width, as one prepared
    native GEMM with alpha folded into B and beta into the bias (a body's step)."""

    name = "step-gemm"
    strided_output = False

    def score(self, node, ins, outs) -> int:
        # above GemmNative (3): in a body, one prepared call beats the per-call packing of the main graph's GEMM
        return 4 if self._operands(node, ins, outs) is not None else 0

    def _operands(self, node, ins, outs) -> tuple[np.ndarray, np.ndarray | None] | None:
        if node.attrs["transA"] or len(ins) < 2 or ins[1] is None or ins[1].value is None:
            return None
        b = ins[1].value.T if node.attrs["transB"] else ins[1].value
        if not _small(ins[0], b, outs[0]) or len(_static(ins[0])) != 2:
            return None
        alpha, beta = float(node.attrs["alpha"]), float(node.attrs["beta"])
        c = ins[2] if len(ins) > 2 and beta != 0 else None
        if c is not None and (c.value is None or c.value.dtype != np.float32 or c.value.size != b.shape[1]
                              or c.value.shape[-1] != b.shape[1]):
            return None
        w = b if alpha == 1 else b * np.float32(alpha)
        bias = None if c is None else np.ascontiguousarray(c.value.reshape(-1) * np.float32(beta))
        return w, bias

    def prepare(self, node, ins, outs) -> RunFn:
        operands = self._operands(node, ins, outs)
        if operands is None:        # the plan's passes changed the node since its score
            return super().prepare(node, ins, outs)
        w, bias = operands
        # NOTE: B row major (a transposed B copied once here): a one-row product then runs as the native GEMV
        # (nn_gemv.h), not as a BLAS sgemm that packs B at every step
        gemm = native.Gemm(np.ascontiguousarray(w), bias, _act(node))
        return _run(gemm, w.shape[0], w.shape[1], _static(outs[0]))


IMPLEMENTATIONS = (MatMulStep, GemmStep)
