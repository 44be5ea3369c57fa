"""The com.microsoft element-wise quantized ops with constant per-tensor parameters as lookup tables on the cpu
device: QLinearAdd / QLinearMul (a 256 x 256 table over the pair of input codes) and QLinearConcat's
requantized inputs (256 entries each); and ai.nnhal CodeTable, the chains optimizer/qtables.py fuses.

Each table is the op's numpy reference kernel (hostkernels/ms_*.py: dequantize, compute and requantize in
float32) evaluated once at prepare on every possible input code, so a run returns exactly what the reference
returns for each element, in one gather of 8-bit codes where the reference makes six float32 passes (the
integer kernels' ``table1`` / ``table2`` where they are loaded, qnative/nq_tables.h: one pass where numpy's take
makes three, with an int16 index; else numpy). QLinearAdd / QLinearMul without a composed tail run computed
instead where the integer kernels have AVX2 (``binary``: the reference's float32 operations, 8 lanes at a time;
used only after it has reproduced the table on all 65536 code pairs at prepare). The
quantized CNNs the int8 precision pass writes run their SiLU's product as QLinearMul, their residuals as
QLinearAdd and their neck concatenations as QLinearConcat.
"""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu import parallel, qnative
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.ms_qlinear_add import QLinearAddKernel
from nnhal.hostkernels.ms_qlinear_concat import QLinearConcatKernel
from nnhal.hostkernels.ms_qlinear_mul import QLinearMulKernel

EIGHT_BIT = (np.dtype(np.uint8), np.dtype(np.int8))
MS = "com.microsoft"


def _codes(dtype: np.dtype) -> np.ndarray:
    """Every value of an 8-bit type, ordered by its bit pattern (index i holds the value whose byte is i)."""
    return np.arange(256, dtype=np.uint8).view(dtype)


def _per_tensor(ins: list, indices) -> bool:
    """The inputs at ``indices`` are constant single values (an absent optional one counts)."""
    for i in indices:
        info = ins[i] if i < len(ins) else None
        if info is None:
            continue
        if info.value is None or np.size(info.value) != 1:
            return False
    return True


def _value(ins: list, i: int) -> np.ndarray | None:
    info = ins[i] if i < len(ins) else None
    return None if info is None else np.asarray(info.value)


def _bytes(x: np.ndarray) -> np.ndarray:
    return x.view(np.uint8) if x.dtype != np.uint8 else x


def _native():
    """The integer kernels' module when it is loaded (its table gathers), else None."""
    return qnative.kernels() if qnative.available() else None


def _output(outputs: list, shape: tuple, dtype, other: np.ndarray | None = None) -> np.ndarray:
    """The planned output when it is a C-contiguous buffer of this shape and dtype that shares no memory with
    ``other`` (the repeated operand of a binary table), else a new array."""
    out = outputs[0] if outputs else None
    if out is not None and out.shape == shape and out.dtype == dtype and out.flags.c_contiguous \
            and (other is None or not np.may_share_memory(out, other)):
        return out
    return np.empty(shape, dtype)


def _repeats_along(small: tuple, big: tuple) -> bool:
    """Whether an array of shape ``small`` broadcast to ``big`` repeats its elements whole, in order, along
    the flat ``big`` (it is one value, or ``big``'s trailing axes after leading ones)."""
    small = tuple(small)
    while small and small[0] == 1:
        small = small[1:]
    return not small or (len(small) <= len(big) and tuple(big[len(big) - len(small):]) == small)


class QLinearBinaryTable(Kernel):
    """QLinearAdd / QLinearMul: y = table[a_code, b_code] (numpy broadcasting of a and b)."""

    domain = MS
    name = "table"
    reference: Kernel

    def score(self, node, ins, outs) -> int:
        a, b = ins[0], ins[3] if len(ins) > 3 else None
        if a is None or b is None or a.dtype not in EIGHT_BIT or b.dtype != a.dtype:
            return 0
        return 5 if _per_tensor(ins, (1, 2, 4, 5, 6, 7)) else 0

    def compose(self, table: np.ndarray) -> np.ndarray:
        """The table a run gathers from, given the op's own (TailedBinaryTable composes a CodeTable in)."""
        return table

    def computed(self, q, params: list, a_all: np.ndarray, b_all: np.ndarray, table: np.ndarray,
                 swapped: np.ndarray) -> tuple | None:
        """The integer kernels' ``binary`` operands (mul, scales and zero points; for (a, b) and for (b, a))
        when that kernel returns ``table`` on every one of the 65536 code pairs in both orders, else None (no
        integer kernels, a composed tail, or parameters whose float32 arithmetic the kernel does not
        reproduce, such as a zero scale's NaN; or the integer kernels on the portable instruction set)."""
        # NOTE: only where the kernel runs in AVX2 (twice the table's speed on MiniLM's residual Adds: the 64K
        # table misses L1); its portable C loop is five times slower than the gather
        if q is None or qnative.status().isa == "portable" or self.compose(table) is not table:
            return None
        scale = [float(np.asarray(params[i], np.float32).reshape(-1)[0]) for i in (1, 4, 6)]
        zero = [0 if params[i] is None else int(np.asarray(params[i]).reshape(-1)[0]) for i in (2, 5, 7)]
        mul = int(self.op_type == "QLinearMul")
        orders = ((mul, scale[0], zero[0], scale[1], zero[1], scale[2], zero[2]),
                  (mul, scale[1], zero[1], scale[0], zero[0], scale[2], zero[2]))
        # NOTE: checked on all 65536 pairs, so the computed path is exact by exhaustion, not by argument
        for operands, want in zip(orders, (table, swapped)):      # swapped: indexed [b << 8 | a]
            got = np.empty(want.shape, want.dtype)
            q.binary(a_all, b_all, got, *operands, 1)
            if not np.array_equal(got, want):
                return None
        return orders

    def prepare(self, node, ins, outs) -> RunFn:
        codes = _codes(np.dtype(ins[0].dtype))
        a_all, b_all = np.repeat(codes, 256), np.tile(codes, 256)
        params = [_value(ins, i) for i in range(8)]
        table = self.compose(np.ascontiguousarray(self.reference.compute(
            node, a_all, params[1], params[2], b_all, params[4], params[5], params[6], params[7]), codes.dtype))
        dtype = table.dtype
        q = _native()
        swapped = np.ascontiguousarray(table.reshape(256, 256).T).reshape(-1)   # indexed [b << 8 | a]
        computed = self.computed(q, params, a_all, b_all, table, swapped)

        def run(inputs: list, outputs: list):
            a, b = inputs[0], inputs[3]
            if computed is not None:
                shape = np.broadcast_shapes(a.shape, b.shape)
                for x, y, operands in ((a, b, computed[0]), (b, a, computed[1])):
                    if x.shape == shape and _repeats_along(y.shape, shape):
                        out = _output(outputs, shape, dtype, y)
                        q.binary(np.ascontiguousarray(x), np.ascontiguousarray(y), out, *operands,
                                 parallel.threads())
                        return (out,)
            if q is not None:
                shape = np.broadcast_shapes(a.shape, b.shape)
                for x, y, t in ((a, b, table), (b, a, swapped)):
                    if x.shape == shape and _repeats_along(y.shape, shape):
                        out = _output(outputs, shape, dtype, y)
                        q.table2(np.ascontiguousarray(x), np.ascontiguousarray(y), t, out, parallel.threads())
                        return (out,)
            if a.shape == np.broadcast_shapes(a.shape, b.shape):
                index = _bytes(a).astype(np.uint16)
                index <<= 8
                index |= _bytes(b)
            else:
                index = np.bitwise_or(np.left_shift(_bytes(a), 8, dtype=np.uint16), _bytes(b), dtype=np.uint16)
            out = outputs[0] if outputs and outputs[0] is not None and outputs[0].shape == index.shape \
                and outputs[0].dtype == dtype else np.empty(index.shape, dtype)
            np.take(table, index, out=out)
            return (out,)

        return run


class QLinearAddTable(QLinearBinaryTable):
    op_type = "QLinearAdd"
    reference = QLinearAddKernel()


class QLinearMulTable(QLinearBinaryTable):
    op_type = "QLinearMul"
    reference = QLinearMulKernel()


class TailedBinaryTable(QLinearBinaryTable):
    """QLinearAdd / QLinearMul with the ai.nnhal CodeTable that alone reads its output composed into its table
    (``tail[table]``): ResNet's residual Add and its Relu in one gather (integer.fuse_table_tails)."""

    name = "table+tail"

    def __init__(self, base: QLinearBinaryTable, tail: np.ndarray):
        self.op_type, self.reference, self.tail = base.op_type, base.reference, np.ascontiguousarray(tail)

    def compose(self, table: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(self.tail[_bytes(table)])


class QLinearConcatTables(Kernel):
    """QLinearConcat: each input whose parameters differ from the output's through its 256-entry table (the
    reference's own requantization of every code), the others copied; one concatenate."""

    op_type = "QLinearConcat"
    domain = MS
    name = "table"

    def score(self, node, ins, outs) -> int:
        xs = ins[2::3]
        if not xs or any(x is None or x.dtype not in EIGHT_BIT or x.dtype != xs[0].dtype for x in xs):
            return 0
        params = [0, 1] + [i for j in range(2, len(ins), 3) for i in (j + 1, j + 2)]
        return 5 if _per_tensor(ins, params) else 0

    def prepare(self, node, ins, outs) -> RunFn:
        reference = QLinearConcatKernel()
        dtype = np.dtype(ins[2].dtype)
        codes = _codes(dtype)
        y_scale, y_zero = _value(ins, 0), _value(ins, 1)
        tables = []
        for j in range(2, len(ins), 3):
            scale, zero = _value(ins, j + 1), _value(ins, j + 2)
            same = np.array_equal(scale, y_scale) and np.array_equal(zero, y_zero)
            tables.append(None if same else reference.compute(_Axis0(), y_scale, y_zero, codes, scale, zero))
        axis = node.attrs["axis"]
        q = _native()

        def requantized(x: np.ndarray, table: np.ndarray) -> np.ndarray:
            if q is None:
                return np.take(table, _bytes(x))
            # NOTE: the native gather (one pass; numpy's take makes three with an intp index), then the
            # concatenation copies it: YOLO's neck concatenations at 640x640 took 12.2 ms with take
            part = np.empty(x.shape, dtype)
            q.table1(np.ascontiguousarray(x), table, part, parallel.threads())
            return part

        def run(inputs: list, outputs: list):
            parts = [x if t is None else requantized(x, t) for x, t in zip(inputs[2::3], tables)]
            shape = parts[0].shape[:axis % parts[0].ndim] + (sum(p.shape[axis] for p in parts),) \
                + parts[0].shape[axis % parts[0].ndim + 1:]
            out = outputs[0] if outputs else None
            if out is None or out.shape != shape or out.dtype != dtype:
                out = np.empty(shape, dtype)
            np.concatenate(parts, axis=axis, out=out)
            return (out,)

        return run


class CodeTableGather(Kernel):
    """ai.nnhal CodeTable (optimizer/qtables.py's fused element-wise chains): one gather into the planned
    output buffer; a [C, 256] table per channel of the input's last axis. A per-channel bias chain that
    qtables describes (attribute ``affine``) runs computed instead (the integer kernels' ``biased``) where
    that reproduces the table on all C x 256 entries."""

    op_type = "CodeTable"
    domain = "ai.nnhal"
    name = "table"

    def score(self, node, ins, outs) -> int:
        return 5 if ins[0] is not None and ins[0].dtype in EIGHT_BIT and ins[1] is not None \
            and ins[1].value is not None else 0

    def prepare(self, node, ins, outs) -> RunFn:
        table = np.ascontiguousarray(ins[1].value)
        q = _native() if table.dtype in EIGHT_BIT else None
        rows = np.arange(table.shape[0]) if table.ndim == 2 else None
        affine = biased_operands(q, node.attrs.get("affine", ()), table)

        def run(inputs: list, outputs: list):
            x = inputs[0]
            out = _output(outputs, x.shape, table.dtype)
            if affine is not None and x.shape[-1:] == table.shape[:1]:
                q.biased(np.ascontiguousarray(x), affine[0], out, *affine[1:], parallel.threads())
            elif q is not None and (rows is None or x.shape[-1:] == table.shape[:1]):
                q.table1(np.ascontiguousarray(x), table, out, parallel.threads())
            elif rows is not None:
                out[...] = table[rows, _bytes(x)]
            else:
                np.take(table, _bytes(x), out=out)
            return (out,)

        return run


def biased_operands(q, affine, table: np.ndarray) -> tuple | None:
    """The integer kernels' ``biased`` operands (bias, x_scale, x_zero, y_scale, y_zero) for a per-channel
    CodeTable's ``affine`` description when that kernel returns ``table`` ([C, 256]) on every code of every
    channel, else None (no description, no integer kernels or only their portable instruction set, or
    parameters whose float32 arithmetic the kernel does not reproduce)."""
    channels = table.shape[0] if table.ndim == 2 else 0
    # NOTE: the [C, 256] table (98-393 KB on MiniLM) misses L1, the arithmetic is ten vector operations per
    # 8 codes; like binary's, the portable scalar loop would be slower than the gather
    if q is None or len(affine) != 4 + channels or not channels or qnative.status().isa == "portable" \
            or table.dtype not in EIGHT_BIT:
        return None
    x_scale, x_zero, y_scale, y_zero = affine[:4]
    lo, hi = (-128, 127) if table.dtype == np.int8 else (0, 255)
    if x_zero != int(x_zero) or y_zero != int(y_zero) or not lo <= x_zero <= hi or not lo <= y_zero <= hi:
        return None
    operands = (np.asarray(affine[4:], np.float32), float(np.float32(x_scale)), int(x_zero),
                float(np.float32(y_scale)), int(y_zero))
    codes = np.ascontiguousarray(np.repeat(_codes(table.dtype)[:, None], channels, 1))     # [256, C]
    got = np.empty_like(codes)
    q.biased(codes, operands[0], got, *operands[1:], 1)
    # NOTE: checked on every entry, so the computed path is exact by exhaustion, not by argument
    return operands if np.array_equal(got.T, table) else None


class _Axis0:
    """The node handed to QLinearConcat's reference when it requantizes one 1-D table."""

    attrs = {"axis": 0}


DOMAINS = {MS: (QLinearAddTable, QLinearMulTable, QLinearConcatTables), "ai.nnhal": (CodeTableGather,)}
IMPLEMENTATIONS = ()
