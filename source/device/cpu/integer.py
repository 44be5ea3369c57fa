"""The cpu device's integer kernels in the plan: quantized products that run on qnative's int8 GEMM.

:func:`use_integer_kernels` runs on the plan's chosen kernels before the fusions: where the integer
kernels are loaded (qnative.status()), it swaps the numpy kernel of each node below for one of these,
which pack the constant weights once at prepare:

* ai.nnhal ``DynamicQuantizeGemm`` with whole-row scales (``block`` 0): every row of X quantized while the
  GEMM packs it (int8 symmetric or uint8 asymmetric, per token), dequantized with the bias in the GEMM's
  epilogue (``float_columns`` still run in float32 beside it). On avx2 the expanding products' rows are
  quantized to 7 bits instead (asymmetric, [0, 127]) and the others' asymmetrically to 8 bits, whatever
  ``activation`` says (``qnative.activation_mode``);
* ``MatMulInteger`` with a constant 2-D B: int32 out;  with a run-time B (both operands activations), each
  matrix of B packed per run, batch dimensions broadcast;
* com.microsoft ``MatMulIntegerToFloat`` with a constant 2-D B (what qchains.py makes of onnxruntime's
  dynamic-quantization chains): dequantized with the bias in the epilogue, bit-equal to its numpy kernel;
* com.microsoft ``DynamicQuantizeMatMul`` with a constant 2-D B: A quantized to uint8 per tensor (the native
  DynamicQuantizeLinear), then MatMulIntegerToFloat's epilogue;
* com.microsoft ``QGemm`` with a constant 2-D B and C absent or an int32 row: onnxruntime's float32 rescale
  (float output, or requantized with ``rounding=1``);
* ``QLinearMatMul`` with constant scales and zero points and a constant 2-D B or a run-time B [..., K, N]
  (per-tensor parameters; each matrix packed per run, as MatMulInteger's): requantized in the
  epilogue exactly as ONNX defines it (the float32 factor applied in double, rounded half to even);
* com.microsoft ``QAttention`` with constant weights: the QKV projection dequantized in the epilogue, the
  attention in float32 as the numpy kernel's;
* ``QLinearConv`` (2-D, group 1 or depthwise, constant weights, scales and zero points): an implicit GEMM
  (or the depthwise kernel) on channels-last integers, in the layout pass's NHWC regions (qlayout.py) or
  with the input and output transposed around it; its
  rescale in float32, as onnxruntime's and nnhal's numpy QLinearConv (pre-quantized models match
  onnxruntime bit for bit; ONNX's reference rescales in double and may differ by one step on a tie);
* ``ConvInteger`` (2-D, group 1 or depthwise, constant weights and zero points): the same kernels, int32 out.

:func:`fuse_code_clamps` then folds a CodeTable that only clamps codes (a Relu / Relu6 at the conv's own
output parameters) into the QLinearConv before it. The integer kernels split their work over the cpu
device's own thread pool (qkernels.c, native/nn_pool_api.h).

Per-block dynamic quantization (``block`` > 0, the precision passes' default, quantize.BLOCK) stays on
its float32 path: block scales vary along K, so no integer sum spans more than a block.
``NNHAL_INTEGER=0`` keeps every node on its numpy kernel (qnative/__init__.py).
"""
from __future__ import annotations

import copy
import dataclasses

import numpy as np

from nnhal.device.cpu import native, parallel, qnative
from nnhal.device.cpu.fusions import Chosen, _readers, sole_reader
from nnhal.device.cpu.kernels.qdq import DynamicQuantizeLinearNative
from nnhal.device.cpu.kernels.qlinear_tables import QLinearAddTable, QLinearMulTable, TailedBinaryTable
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.fused import Activation, activation_of, fuse
from nnhal.hostkernels.ms_qattention import self_attention
from nnhal.hostkernels.op_dynamic_quantize_linear import DynamicQuantizeLinearKernel
from nnhal.hostkernels.op_gelu import GeluFast
from nnhal.operator.table import get_prototype

_INF = float("inf")


def _const(info) -> np.ndarray | None:
    return None if info is None or info.value is None else np.asarray(info.value)


def _zero(value: np.ndarray | None, dtype) -> np.ndarray | None:
    """A zero-point array for the kernels (None when absent or all zero)."""
    if value is None or not np.any(value):
        return None
    return np.ascontiguousarray(value.reshape(-1), dtype)


def _out(outputs: list, shape: tuple, dtype) -> np.ndarray:
    """The planned output when it is a C-contiguous buffer of this shape and dtype, else a new array."""
    out = outputs[0] if outputs else None
    if out is not None and out.shape == shape and out.dtype == dtype and out.flags.c_contiguous:
        return out
    return np.empty(shape, dtype)


def _threads() -> int:
    return parallel.threads()


class DynamicQuantizeGemmInteger(Kernel):
    """DynamicQuantizeGemm (block 0) on the int8 GEMM: per-row quantization fused into the A packing."""

    op_type = "DynamicQuantizeGemm"
    domain = "ai.nnhal"
    name = "int8 gemm"

    def __init__(self, kscale: np.ndarray | None = None, gelu: GeluFast | None = None):
        # a Mul of A by a constant [K] vector folded in (fold_smooth_scales): gemm_dynamic multiplies each row by
        # it while packing
        self.kscale = None if kscale is None else np.ascontiguousarray(kscale, np.float32).reshape(-1)
        if kscale is not None:
            self.name = f"{self.name}+kscale"
        # the exact Gelu after the product (fuse_dynamic_gelu), applied by gemm_dynamic; this is the Gelu node's
        # own kernel, which the float32 outlier columns take after their float product
        self.gelu = gelu
        if gelu is not None:
            self.name = f"{self.name}+gelu"

    def with_(self, kscale: np.ndarray | None = None, gelu: GeluFast | None = None) -> DynamicQuantizeGemmInteger:
        """This kernel with ``kscale`` / ``gelu`` set where given (the fusions' one way to add to it)."""
        return DynamicQuantizeGemmInteger(self.kscale if kscale is None else kscale,
                                          self.gelu if gelu is None else gelu)

    def score(self, node, ins, outs) -> int:
        ok = not int(node.attrs.get("block") or 0) and _const(ins[1]) is not None and _const(ins[2]) is not None \
            and (len(ins) < 4 or ins[3] is None or _const(ins[3]) is not None)
        return 10 if ok else 0

    def prepare(self, node, ins, outs) -> RunFn:
        q = qnative.kernels()
        w = np.ascontiguousarray(_const(ins[1]), np.int8)             # [N, K]
        n, k = w.shape
        # NOTE: read once per prepared node: the int8 lowering happens at the first run
        mode = qnative.activation_mode()
        packed = q.pack_b(w, k, n, None, 1, int(mode == "1" or (mode == "expanding" and n > k)), qnative.split_mode())
        scale = np.ascontiguousarray(_const(ins[2]), np.float32).reshape(-1)
        bias = _const(ins[3]) if len(ins) > 3 else None
        bias = None if bias is None else np.ascontiguousarray(bias, np.float32).reshape(-1)
        signed = int(node.attrs["activation"] == "int8" and mode == "0")
        columns = np.asarray(node.attrs["float_columns"] or [], np.int64)
        kscale = self.kscale
        w_float = np.ascontiguousarray(_const(ins[4]).T, np.float32) if columns.size else None
        if w_float is not None and kscale is not None:
            # NOTE: the float32 outlier columns take the folded Mul on their weights: x (s w) instead of (x s) w,
            # a rounding of each product term apart (a few units in the last place of the column)
            w_float = np.ascontiguousarray(w_float * kscale[:, None], np.float32)
        bias_cols = None if bias is None or not columns.size else bias[columns]
        gelu = self.gelu
        extra = () if kscale is None and gelu is None else (kscale,) if gelu is None else (kscale, 1)

        def run(inputs: list, outputs: list):
            x = np.ascontiguousarray(inputs[0], np.float32)
            out = _out(outputs, (x.shape[0], n), np.float32)
            q.gemm_dynamic(x, signed, packed, out, bias, scale, -_INF, _INF, _threads(), *extra)
            if w_float is not None:
                cols = x @ w_float if bias_cols is None else x @ w_float + bias_cols
                out[:, columns] = cols if gelu is None else gelu.into(cols, cols)
            return (out,)

        return run


def _vector_along_last(info, k) -> bool:
    """``info`` is a constant float32 vector along the last axis of a tensor whose last dimension is ``k``."""
    value = None if info is None else info.value
    return value is not None and np.asarray(value).dtype == np.float32 and np.ndim(value) >= 1 \
        and np.shape(value)[-1] == k and np.size(value) == k


def fold_smooth_scales(chosen: list[Chosen], external: set[str]) -> list[Chosen]:
    """Each Mul of a float32 tensor by a constant float32 vector along its last axis (the SmoothQuant Mul that
    the int8 lowering puts before a token product, optimizer/outliers.py) whose every reader is a Reshape to the
    2-D A of a DynamicQuantizeGemm on the integer GEMM (the only reader of that Reshape): the Mul dropped, the
    Reshapes reading its input, and each product multiplying its rows by the vector while it quantizes them
    (gemm_dynamic's ``kscale``; the same float32 products, so the same codes) instead of a pass over A. MiniLM:
    four per layer (QKV's shared input, the attention output, both FFN inputs)."""
    reads: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    for pos, entry in enumerate(chosen):
        for name in entry.node.all_inputs:
            reads[name] = reads.get(name, 0) + 1
            readers.setdefault(name, []).append(pos)
    out, dropped = list(chosen), set()
    for pos, (node, kernel, ins, outs) in enumerate(chosen):
        if node.op_type != "Mul" or node.domain or activation_of(node) is not None or len(ins) != 2 \
                or node.outputs[0] in external or outs[0].dtype != np.float32 or not outs[0].shape:
            continue
        k = outs[0].shape[-1]
        side = next((i for i in (0, 1) if _vector_along_last(ins[1 - i], k)), None)
        x = None if side is None else ins[side]
        if x is None or x.value is not None or x.dtype != np.float32 or x.shape != outs[0].shape:
            continue
        gemms = []
        for r in readers.get(node.outputs[0], []):
            view = chosen[r]
            if view.node.op_type != "Reshape" or view.node.inputs[0] != node.outputs[0] \
                    or view.node.outputs[0] in external or reads.get(view.node.outputs[0]) != 1:
                break
            g = readers[view.node.outputs[0]][0]
            gemm = chosen[g]
            if type(gemm.kernel) is not DynamicQuantizeGemmInteger or gemm.kernel.kscale is not None \
                    or gemm.node.inputs[0] != view.node.outputs[0] or gemm.ins[0] is None \
                    or gemm.ins[0].shape is None or gemm.ins[0].shape[-1] != k:
                break
            gemms.append((r, g))
        if not gemms or len(gemms) != reads.get(node.outputs[0]):
            continue
        vector = np.asarray(ins[1 - side].value, np.float32).reshape(-1)
        for r, g in gemms:
            view, gemm = out[r], out[g]
            inputs = [node.inputs[side]] + list(view.node.inputs[1:])
            out[r] = view._replace(node=dataclasses.replace(view.node, inputs=inputs), ins=[x] + list(view.ins[1:]))
            out[g] = gemm._replace(kernel=gemm.kernel.with_(kscale=vector))
        dropped.add(pos)
    return [entry for pos, entry in enumerate(out) if pos not in dropped]


def fuse_dynamic_gelu(chosen: list[Chosen], external: set[str]) -> list[Chosen]:
    """Each exact float32 Gelu (its kernel GeluFast or the cpu device's GeluNative, after fusions.fuse_gelu) whose
    input is the output of a ``DynamicQuantizeGemm`` on the integer GEMM, directly or through a Reshape (the
    int8 lowering's view back to [batch, tokens, N]), with no other reader of either: the Gelu dropped and applied
    by the product (gemm_dynamic's ``gelu``) to each block of output rows it has just written, still in cache, on
    the product's threads, instead of a separate one-thread pass over the whole output; the Reshape, when there
    is one, then produces the Gelu's output. On the SIMD instruction sets the values are the native Gelu's bit
    for bit. MiniLM: its six FFN expansions. Gelu is element-wise, so it commutes with the Reshape."""
    reads, reader, _ = _readers(chosen)
    out, dropped = list(chosen), set()
    for pos, entry in enumerate(chosen):
        if type(entry.kernel) is not DynamicQuantizeGemmInteger or entry.kernel.gelu is not None:
            continue
        view, j = None, sole_reader(chosen, reads, reader, external, dropped, entry.node.outputs[0],
                                    ("Reshape", "Gelu"))
        if j is not None and chosen[j].node.op_type == "Reshape":
            if chosen[j].node.inputs[0] != entry.node.outputs[0]:
                continue
            view, j = j, sole_reader(chosen, reads, reader, external, dropped, chosen[j].node.outputs[0],
                                     ("Gelu",))
        if j is None:
            continue
        gelu = chosen[j]
        if not isinstance(gelu.kernel, GeluFast) or gelu.node.attrs.get("approximate", "none") != "none" \
                or gelu.outs[0].dtype != np.float32:
            continue
        out[pos] = entry._replace(kernel=entry.kernel.with_(gelu=gelu.kernel))
        if view is None:
            out[pos] = out[pos]._replace(node=dataclasses.replace(entry.node, outputs=list(gelu.node.outputs)),
                                         outs=list(gelu.outs))
        else:
            v = chosen[view]
            out[view] = v._replace(node=dataclasses.replace(v.node, outputs=list(gelu.node.outputs)),
                                   outs=list(gelu.outs))
        dropped.add(j)
    return [entry for pos, entry in enumerate(out) if pos not in dropped]


def _matrix_b(ins, index: int) -> np.ndarray | None:
    b = _const(ins[index])
    return b if b is not None and b.ndim == 2 and b.dtype in (np.uint8, np.int8) else None


def _packed_b(q, ins, index: int, zero_index: int, trans: int = 0):
    """(K, N and the integer GEMM's packing) of the constant 8-bit matrix ins[index] ([K, N], or [N, K] when
    ``trans``) with its zero point ins[zero_index] (absent or all zero: none)."""
    b = _matrix_b(ins, index)
    k, n = b.shape[::-1] if trans else b.shape
    zero = _const(ins[zero_index]) if len(ins) > zero_index else None
    return k, n, q.pack_b(np.ascontiguousarray(b), k, n, _zero(zero, b.dtype), trans, 0, qnative.split_mode())


def _a_ok(info, k: int) -> bool:
    return info is not None and info.dtype in (np.uint8, np.int8) and info.shape is not None \
        and len(info.shape) >= 2 and info.shape[-1] == k


def _runtime_b(ins, index: int, k) -> bool:
    """ins[index] is a run-time 8-bit B [..., K, N] (both operands activations, as attention's QK^T and PV in
    quantized transformers), K known and equal to A's and within the GEMM's exact range."""
    b = ins[index]
    return b is not None and b.value is None and b.dtype in (np.uint8, np.int8) and b.shape is not None \
        and len(b.shape) >= 2 and isinstance(k, (int, np.integer)) and b.shape[-2] == k and k <= qnative.kernels().MAX_K


def _each_matrix(q, a: np.ndarray, b: np.ndarray, b_zero, dtype, outputs: list, gemm) -> np.ndarray:
    """out[..., M, N] for A [..., M, K] and a run-time B [..., K, N] (batch dimensions broadcast as numpy's
    matmul): each matrix of B packed for the integer GEMM when the run reaches it (once when B has one), then
    ``gemm(a_matrix, packed, out_matrix, threads)``."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    (m, k), n = a.shape[-2:], b.shape[-1]
    out = _out(outputs, batch + (m, n), dtype)
    shared = int(np.prod(b.shape[:-2])) == 1
    # NOTE: run-time B packs wide (split 0): the split's counting pass would be paid at every run
    packed = q.pack_b(np.ascontiguousarray(b.reshape(k, n)), k, n, b_zero, 0, 0, 0) if shared else None
    a = np.broadcast_to(a, batch + (m, k))
    b = np.broadcast_to(b, batch + (k, n))
    indices = list(np.ndindex(*batch))
    threads = _threads() if len(indices) == 1 else 1

    def matrices(start: int, stop: int) -> None:
        for index in indices[start:stop]:
            one = packed if shared else q.pack_b(np.ascontiguousarray(b[index]), k, n, b_zero, 0, 0, 0)
            gemm(np.ascontiguousarray(a[index]), one, out[index], threads)

    # NOTE: many small products (heads): the matrices split over the pool, each product on one thread; one
    # product splits its own rows
    parallel.for_ranges(len(indices), parallel.gemm_work(len(indices) * m * k * n), matrices)
    return out


class MatMulIntegerKernel(Kernel):
    """MatMulInteger with constant B: exact int32 products on the integer GEMM (rows of every batch)."""

    op_type = "MatMulInteger"
    name = "int8 gemm"

    def score(self, node, ins, outs) -> int:
        za = ins[2] if len(ins) > 2 else None
        zb = ins[3] if len(ins) > 3 else None
        # a_zero: one zero point, constant or computed (DynamicQuantizeLinear's, in onnxruntime's dynamic models)
        if za is not None and (za.shape is None or int(np.prod(za.shape)) != 1 or za.dtype != ins[0].dtype):
            return 0
        b = _matrix_b(ins, 1)
        if b is None:
            a = ins[0]
            runtime = _a_ok(a, a.shape[-1] if a is not None and a.shape else None) \
                and _runtime_b(ins, 1, a.shape[-1]) and (zb is None or _scalar(zb) and zb.dtype == ins[1].dtype)
            return 10 if runtime else 0
        if not _a_ok(ins[0], b.shape[0]):
            return 0
        if zb is not None and (zb.value is None or np.size(zb.value) not in (1, b.shape[1])):
            return 0
        return 10

    def prepare(self, node, ins, outs) -> RunFn:
        q = qnative.kernels()
        if _matrix_b(ins, 1) is None:
            return self._prepare_runtime_b(q)
        k, n, packed = _packed_b(q, ins, 1, 3)

        def run(inputs: list, outputs: list):
            a = np.ascontiguousarray(inputs[0])
            za = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
            out = _out(outputs, a.shape[:-1] + (n,), np.int32)
            q.gemm(a, None if za is None else np.ascontiguousarray(za).reshape(1), packed, out, None, None, 0, 0.0,
                   0.0, 0, _threads())
            return (out,)

        return run

    @staticmethod
    def _prepare_runtime_b(q) -> RunFn:
        """Both operands at run time: exact int32 products, each matrix of B packed per run."""
        def run(inputs: list, outputs: list):
            a, b = inputs[0], inputs[1]
            za = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
            za = None if za is None else np.ascontiguousarray(za).reshape(1)
            zb = _zero(inputs[3] if len(inputs) > 3 else None, b.dtype)

            def gemm(am, packed, out, threads):
                q.gemm(am, za, packed, out, None, None, 0, 0.0, 0.0, 0, threads)

            return (_each_matrix(q, a, b, zb, np.int32, outputs, gemm),)

        return run


def _scalar(info) -> bool:
    """One value (constant or computed at run time, as DynamicQuantizeLinear's scale and zero point)."""
    return info is not None and info.shape is not None and int(np.prod(info.shape)) == 1


def _float_epilogue_ok(ins, b_index: int, scale_index: int, zero_index: int, bias_index: int) -> bool:
    """A constant 2-D 8-bit B with a constant float32 scale and zero point (per tensor or per column) and a
    constant float32 bias of N values (or none), the dequantizing epilogue's parameters."""
    b = _matrix_b(ins, b_index)
    if b is None:
        return False
    b_scale = _const(ins[scale_index])
    if b_scale is None or b_scale.dtype != np.float32 or b_scale.size not in (1, b.shape[1]):
        return False
    zb = ins[zero_index] if len(ins) > zero_index else None
    if zb is not None and (_const(zb) is None or np.size(_const(zb)) not in (1, b.shape[1])):
        return False
    bias = _const(ins[bias_index]) if len(ins) > bias_index and ins[bias_index] is not None else None
    if len(ins) > bias_index and ins[bias_index] is not None and (
            bias is None or bias.dtype != np.float32 or bias.size != b.shape[1]):
        return False
    return True


def _float_product(q, ins, b_index: int, scale_index: int, zero_index: int, bias_index: int):
    """The run(a, a_zero, a_scale, outputs) of a product dequantized in the integer GEMM's epilogue: ``float32(sum)
    * (a_scale * b_scale[n]) + bias[n]`` in float32 in that order (no contraction), as onnxruntime and the numpy
    kernels compute it."""
    k, n, packed = _packed_b(q, ins, b_index, zero_index)
    b_scale = np.broadcast_to(_const(ins[scale_index]).reshape(-1), (n,)).astype(np.float32)
    bias = _const(ins[bias_index]) if len(ins) > bias_index and ins[bias_index] is not None else None
    bias = None if bias is None else np.ascontiguousarray(bias, np.float32).reshape(-1)

    def product(a: np.ndarray, za, a_scale, outputs: list) -> np.ndarray:
        a = np.ascontiguousarray(a)
        scale = np.ascontiguousarray(np.asarray(a_scale, np.float32).reshape(()) * b_scale, np.float32)
        out = _out(outputs, a.shape[:-1] + (n,), np.float32)
        q.gemm(a, None if za is None else np.ascontiguousarray(za).reshape(1), packed, out, bias, scale, 0,
               -_INF, _INF, 0, _threads())
        return out

    return product


class MatMulIntegerToFloatKernel(Kernel):
    """com.microsoft MatMulIntegerToFloat with constant B, b_scale and b_zero (per tensor or per column) and a
    constant bias: the integer GEMM dequantizing in its epilogue (``_float_product``), bit-equal to the op's numpy
    kernel. The activations' scale and zero point may be computed at run time (a DynamicQuantizeLinear's)."""

    op_type = "MatMulIntegerToFloat"
    domain = "com.microsoft"
    name = "int8 gemm"

    def score(self, node, ins, outs) -> int:
        if not _float_epilogue_ok(ins, 1, 3, 5, 6) or not _a_ok(ins[0], ins[1].value.shape[0]) \
                or not _scalar(ins[2]) or ins[2].dtype != np.float32:
            return 0
        za = ins[4] if len(ins) > 4 else None
        return 0 if za is not None and (not _scalar(za) or za.dtype != ins[0].dtype) else 10

    def prepare(self, node, ins, outs) -> RunFn:
        product = _float_product(qnative.kernels(), ins, 1, 3, 5, 6)

        def run(inputs: list, outputs: list):
            za = inputs[4] if len(inputs) > 4 else None
            return (product(inputs[0], za, inputs[2], outputs),)

        return run


class DynamicQuantizeMatMulKernel(Kernel):
    """com.microsoft DynamicQuantizeMatMul with constant B, b_scale and b_zero (per tensor or per column) and a
    constant bias: float32 A quantized to uint8 per tensor by the native DynamicQuantizeLinear (the scale and zero
    point as onnxruntime and the numpy kernel form them), then the integer GEMM dequantizing in its epilogue, as
    MatMulIntegerToFloat."""

    op_type = "DynamicQuantizeMatMul"
    domain = "com.microsoft"
    name = "int8 gemm"

    def score(self, node, ins, outs) -> int:
        a = ins[0]
        ok = a is not None and a.dtype == np.float32 and a.shape is not None and len(a.shape) >= 2 \
            and _float_epilogue_ok(ins, 1, 2, 3, 4) and a.shape[-1] == ins[1].value.shape[0]
        return 10 if ok else 0

    def prepare(self, node, ins, outs) -> RunFn:
        product = _float_product(qnative.kernels(), ins, 1, 2, 3, 4)
        quantize = DynamicQuantizeLinearNative() if native.available() else DynamicQuantizeLinearKernel()

        def run(inputs: list, outputs: list):
            aq, a_scale, a_zero = quantize.compute(node, inputs[0])
            return (product(aq, a_zero, a_scale, outputs),)

        return run


def _given(ins, index: int):
    """ins[index], or None when the optional input is absent."""
    return ins[index] if len(ins) > index else None


class QGemmInteger(Kernel):
    """com.microsoft QGemm with a constant 2-D B, its scale and zero point constant (per tensor or per column), C
    absent or a constant int32 row of N values, y_scale and y_zero constant: ``alpha * (A - a_zero)(B - b_zero)``
    on the integer GEMM, C added to the int32 sum, then as onnxruntime computes it: float output
    ``float32(sum + C) * ((alpha * a_scale) * b_scale[n])``; quantized output that factor divided by y_scale,
    applied in float32, rounded half to even, + y_zero, saturated (the epilogue's ``rounding=1``). A's scale and
    zero point may be computed at run time; transA transposes A first."""

    op_type = "QGemm"
    domain = "com.microsoft"
    name = "int8 gemm"

    def score(self, node, ins, outs) -> int:
        a, trans_b = ins[0], node.attrs["transB"]
        b = _matrix_b(ins, 3)
        if b is None or a is None or a.dtype not in (np.uint8, np.int8) or a.shape is None or len(a.shape) != 2:
            return 0
        k, n = b.shape[::-1] if trans_b else b.shape
        if a.shape[0 if node.attrs["transA"] else 1] != k or not _scalar(ins[1]) or ins[1].dtype != np.float32:
            return 0
        if _given(ins, 2) is not None and (not _scalar(ins[2]) or ins[2].dtype != a.dtype):
            return 0
        b_scale, b_zero, c = _const(ins[4]), _given(ins, 5), _given(ins, 6)
        if b_scale is None or b_scale.dtype != np.float32 or b_scale.size not in (1, n):
            return 0
        if b_zero is not None and (_const(b_zero) is None or np.size(_const(b_zero)) not in (1, n)):
            return 0
        if c is not None and (_const(c) is None or _const(c).dtype != np.int32
                              or not (_const(c).size == 1 or _const(c).size == n == _const(c).shape[-1])):
            return 0
        y_scale, y_zero = _given(ins, 7), _given(ins, 8)
        if y_scale is not None and (_const(y_scale) is None or np.size(_const(y_scale)) != 1):
            return 0
        return 0 if y_zero is not None and (_const(y_zero) is None or np.size(_const(y_zero)) != 1) else 10

    def prepare(self, node, ins, outs) -> RunFn:
        q = qnative.kernels()
        k, n, packed = _packed_b(q, ins, 3, 5, node.attrs["transB"])
        trans_a = node.attrs["transA"]
        alpha = np.float32(node.attrs["alpha"])
        b_scale = np.broadcast_to(_const(ins[4]).reshape(-1), (n,)).astype(np.float32)
        c = _const(_given(ins, 6))
        bias = None if c is None else np.ascontiguousarray(np.broadcast_to(c.reshape(-1), (n,)), np.int32)
        y_scale, y_zero = _const(_given(ins, 7)), _const(_given(ins, 8))
        quantized = y_scale is not None
        dtype = y_zero.dtype if y_zero is not None else (ins[0].dtype if quantized else np.dtype(np.float32))
        yz = 0 if y_zero is None else int(y_zero.reshape(()))

        def run(inputs: list, outputs: list):
            a = inputs[0].T if trans_a else inputs[0]
            a = np.ascontiguousarray(a)
            za = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
            za = None if za is None else np.ascontiguousarray(za).reshape(1)
            # NOTE: onnxruntime's order: (alpha * a_scale) * b_scale[n], then / y_scale, all float32
            scale = alpha * np.asarray(inputs[1], np.float32).reshape(()) * b_scale
            shape = (a.shape[0], n)
            if quantized:
                factor = np.ascontiguousarray(scale / y_scale.reshape(()).astype(np.float32), np.float32)
                out = _out(outputs, shape, dtype)
                q.gemm(a, za, packed, out, bias, factor, yz, -_INF, _INF, 1, _threads())
            elif bias is None:
                out = _out(outputs, shape, dtype)
                q.gemm(a, za, packed, out, None, np.ascontiguousarray(scale, np.float32), 0, -_INF, _INF, 0,
                       _threads())
            else:
                # NOTE: C joins the int32 sum before the float scale (the float epilogue only adds a float bias)
                acc = np.empty(shape, np.int32)
                q.gemm(a, za, packed, acc, bias, None, 0, 0.0, 0.0, 0, _threads())
                out = _out(outputs, shape, dtype)
                np.multiply(acc, scale, out=out, dtype=np.float32)
            return (out,)

        return run


class QAttentionInteger(Kernel):
    """com.microsoft QAttention with constant weights, weight scale and zero point (per tensor or per column) and
    bias: the QKV projection on the integer GEMM dequantizing in its epilogue (``_float_product``, bit-equal to
    the numpy kernel's), then the numpy kernel's float32 self-attention with its products on the pool."""

    op_type = "QAttention"
    domain = "com.microsoft"
    name = "int8 gemm"

    def score(self, node, ins, outs) -> int:
        x = ins[0]
        if not _float_epilogue_ok(ins, 1, 4, 7, 2) or x is None or x.shape is None or len(x.shape) != 3 \
                or not _a_ok(x, ins[1].value.shape[0]) or not _scalar(ins[3]) or ins[3].dtype != np.float32:
            return 0
        xz = _given(ins, 6)
        return 0 if xz is not None and (not _scalar(xz) or xz.dtype != x.dtype) else 10

    def prepare(self, node, ins, outs) -> RunFn:
        product = _float_product(qnative.kernels(), ins, 1, 4, 7, 2)

        def run(inputs: list, outputs: list):
            qkv = product(inputs[0], _given(inputs, 6), inputs[3], [])
            mask = _given(inputs, 5)
            out = self_attention(node, qkv, mask, parallel.matmul)
            target = outputs[0] if outputs else None
            if target is not None and target.shape == out.shape and target.dtype == out.dtype:
                np.copyto(target, out)
                return (target,)
            return (out,)

        return run


class QLinearMatMulKernel(Kernel):
    """QLinearMatMul with constant B, scales and zero points: requantized in the GEMM's epilogue."""

    op_type = "QLinearMatMul"
    name = "int8 gemm"

    def score(self, node, ins, outs) -> int:
        if any(_const(ins[i]) is None for i in (1, 2, 4, 5, 6, 7)) \
                or any(np.size(_const(ins[i])) != 1 for i in (1, 2, 6, 7)):
            return 0
        b = _matrix_b(ins, 3)
        if b is None:       # run-time B: per-tensor parameters
            a = ins[0]
            ok = _a_ok(a, a.shape[-1] if a is not None and a.shape else None) and _runtime_b(ins, 3, a.shape[-1]) \
                and np.size(_const(ins[4])) == np.size(_const(ins[5])) == 1
            return 10 if ok else 0
        if not _a_ok(ins[0], b.shape[0]):
            return 0
        return 10 if all(np.size(_const(ins[i])) in (1, b.shape[1]) for i in (4, 5)) else 0

    def prepare(self, node, ins, outs) -> RunFn:
        q = qnative.kernels()
        za = _zero(_const(ins[2]), ins[0].dtype)
        # NOTE: the factor in the scales' own type (float32), as ONNX forms it; the kernel applies it in double
        factor = _const(ins[1]).reshape(()) * _const(ins[4]).reshape(-1) / _const(ins[6]).reshape(())
        y_zero = _const(ins[7])
        dtype, yz = y_zero.dtype, int(y_zero.reshape(()))
        if _matrix_b(ins, 3) is None:
            zb = _zero(_const(ins[5]), ins[3].dtype)

            def run_runtime_b(inputs: list, outputs: list):
                b = inputs[3]
                scale = np.ascontiguousarray(np.broadcast_to(factor, (b.shape[-1],)), np.float32)

                def gemm(am, packed, out, threads):
                    q.gemm(am, za, packed, out, None, scale, yz, -_INF, _INF, 0, threads)

                return (_each_matrix(q, inputs[0], b, zb, dtype, outputs, gemm),)

            return run_runtime_b
        k, n, packed = _packed_b(q, ins, 3, 5)
        factor = np.ascontiguousarray(np.broadcast_to(factor, (n,)), np.float32)

        def run(inputs: list, outputs: list):
            a = np.ascontiguousarray(inputs[0])
            out = _out(outputs, a.shape[:-1] + (n,), dtype)
            q.gemm(a, za, packed, out, None, factor, yz, -_INF, _INF, 0, _threads())
            return (out,)

        return run


def _conv_shape_ok(node, x, w) -> bool:
    """A 2-D convolution of a 4-D 8-bit input by constant 8-bit weights, group 1 or depthwise, K within the
    integer GEMM's exact range."""
    eight_bit = (np.uint8, np.int8)
    if w is None or w.ndim != 4 or w.dtype not in eight_bit or x is None or x.dtype not in eight_bit:
        return False
    if x.shape is None or len(x.shape) != 4:
        return False
    group = node.attrs["group"]
    if group != 1 and not (group > 1 and w.shape[1] == 1 and w.shape[0] == group):
        return False
    return w.shape[1] * w.shape[2] * w.shape[3] <= qnative.kernels().MAX_K


# NOTE: 2G, with G the F(2x2, 3x3) weight transform: every entry an integer, so U = 2G g 2G^T is exact in int16
_WINO_G2 = np.array([[2, 0, 0], [1, 1, 1], [1, -1, 1], [0, 0, 2]], np.int32)


def winograd_weights(w: np.ndarray) -> np.ndarray:
    """The int16 F(2x2, 3x3) weights of int8 ``w`` [M, C, 3, 3] (zero point 0) for qkernels' ``winograd``: U = 2G g
    2G^T per (output, input) channel, packed [16][ceil(M / 16)][kp / 2][16][2] (kp: C rounded up to 4; panels of
    16 output channels in input-channel pairs, the avx2 wide micro-kernel's layout), 32-byte aligned."""
    m, c = w.shape[:2]
    u = np.einsum("ik,mckl,jl->ijmc", _WINO_G2, w.astype(np.int32), _WINO_G2).reshape(16, m, c)
    panels, kp = -(-m // 16), -(-c // 4) * 4
    pad = np.zeros((16, panels * 16, kp), np.int16)
    pad[:, :m, :c] = u
    laid = pad.reshape(16, panels, 16, kp // 2, 2).transpose(0, 1, 3, 2, 4)
    buf = np.empty(laid.size + 16, np.int16)
    off = (-buf.__array_interface__["data"][0] % 32) // 2
    out = buf[off:off + laid.size]
    out.reshape(laid.shape)[...] = laid
    return out


def winograd_legal(node, ins, w: np.ndarray, w_zero: np.ndarray | None) -> bool:
    """Whether a group-1 integer convolution can run by exact integer Winograd F(2x2, 3x3): 3x3, stride 1,
    dilation 1, int8 weights with zero point 0, at most ``WINOGRAD_MAX_C`` input channels (every int32 sum exact),
    on the avx2 or portable instruction set (the VNNI ones keep the direct kernel, see docs/int8.md)."""
    if node.attrs.get("group", 1) != 1 or w.dtype != np.int8 or w.shape[2:] != (3, 3) \
            or (w_zero is not None and np.any(w_zero)) or qnative.status().isa not in ("avx2", "portable"):
        return False
    x = ins[0]
    if x is None or x.shape is None or len(x.shape) != 4:
        return False
    g = get_prototype("", "Conv").geometry(node, (1, w.shape[1], 8, 8), w.shape)
    return tuple(g["strides"]) == (1, 1) and tuple(g["dilations"]) == (1, 1) \
        and w.shape[1] <= qnative.kernels().WINOGRAD_MAX_C


def winograd_wins(w: np.ndarray) -> bool:
    """The default choice between Winograd and the direct kernel for a legal convolution (docs/int8.md, "Exact
    integer Winograd F(2x2, 3x3)"): on avx2 only (portable is for tests; the VNNI sets are not legal), with at
    least ``WINOGRAD_MIN_CHANNELS`` on both sides and at most ``WINOGRAD_MAX_CM`` input x output channels."""
    m, c = w.shape[:2]
    return qnative.status().isa == "avx2" and min(m, c) >= WINOGRAD_MIN_CHANNELS and m * c <= WINOGRAD_MAX_CM


# NOTE: measured (benchmarks/qwinograd.py, one thread, batch 8, 7-bit weights, the direct kernel on vpmaddubsw):
# Winograd 0.73-0.81x the direct time from 16 -> 16 at 160x160 to 256 -> 256 at 14x14, but 1.21x at 512 -> 512 on
# 7x7: its transformed weights (16 x 512 x 512 int16, 8 MB) are streamed from memory once per chunk of 12 tiles,
# the direct kernel's bytes (2.3 MB) once per 256 pixels. Smaller shapes were not measured.
WINOGRAD_MIN_CHANNELS = 16
WINOGRAD_MAX_CM = 256 * 256


def choose_winograd(chosen: list[Chosen]) -> list[Chosen]:
    """Each group-1 QLinearConv / ConvInteger on the integer kernels that :func:`winograd_legal` allows and
    :func:`qnative.winograd_mode` / :func:`winograd_wins` choose, on the same kernel running qkernels' exact integer
    Winograd F(2x2, 3x3) (name "... winograd", shown in describe and the profile). Runs after the layout pass."""
    mode = qnative.winograd_mode()
    if mode == "0":
        return chosen
    out = list(chosen)
    for pos, entry in enumerate(chosen):
        kernel = entry.kernel
        if not isinstance(kernel, _IntegerConv) or kernel.winograd:
            continue
        w = _const(entry.ins[kernel.w_index])
        w_zero = _const(entry.ins[kernel.w_zero_index]) if len(entry.ins) > kernel.w_zero_index else None
        if w is None or w.ndim != 4 or not winograd_legal(entry.node, entry.ins, w, w_zero):
            continue
        if mode == "1" or winograd_wins(w):
            out[pos] = entry._replace(kernel=kernel.with_winograd())
    return out


class _IntegerConv(Kernel):
    """The convolutions on the integer kernels (implicit GEMM in NHWC, or the depthwise kernel): subclasses
    give the weights' and zero points' positions and the epilogue. NCHW input and output are transposed
    around the kernel, unless the layout pass places the node in a channels-last region (``channels_last``:
    the NHWC subclass reads and writes (N, H, W, C) storage)."""

    nhwc = False
    nhwc_kernel: Kernel | None = None
    w_index = 1
    w_zero_index = 3

    winograd = False        # run by qkernels' winograd (choose_winograd)

    def __init__(self, table: np.ndarray | None = None):
        # a fused CodeTable's 256 output codes (fuse_code_tables), applied in the requantizing write-back
        self.table = table
        if table is not None:
            self.name = f"{self.name}+table"

    def with_winograd(self) -> _IntegerConv:
        """This kernel running by exact integer Winograd F(2x2, 3x3) (:func:`choose_winograd`)."""
        kernel = copy.copy(self)
        kernel.winograd = True
        kernel.name = f"{self.name} winograd"
        return kernel

    def channels_last(self, node, ins, outs) -> Kernel | None:
        """The NHWC form of this kernel for the layout pass (layout.py, qlayout.py): the same node, its input 0
        and output 0 stored (N, H, W, C); only for a static input shape."""
        ok = not self.nhwc and ins[0].static and self.score(node, ins, outs) > 0
        if not ok:
            return None
        return type(self).nhwc_kernel if self.table is None else type(type(self).nhwc_kernel)(self.table)

    def epilogue(self, ins, m: int) -> tuple:
        """(output dtype, int32 bias or None, float32 factor or None, output zero point) for ``m`` channels."""
        raise NotImplementedError

    def prepare(self, node, ins, outs) -> RunFn:
        q = qnative.kernels()
        w = _const(ins[self.w_index])
        m = w.shape[0]
        w_zero_value = _const(ins[self.w_zero_index]) if len(ins) > self.w_zero_index else None
        if node.attrs["group"] > 1:
            w_zero = np.zeros(m, np.int32) if w_zero_value is None \
                else np.broadcast_to(w_zero_value.reshape(-1), (m,)).astype(np.int32)
            taps = np.ascontiguousarray((w[:, 0].astype(np.int32) - w_zero[:, None, None]).transpose(1, 2, 0),
                                        np.int16)
            packed = None
        elif self.winograd:
            taps = None
            packed = winograd_weights(w)
        else:
            taps = None
            packed = q.pack_b(np.ascontiguousarray(w.transpose(0, 2, 3, 1)), int(np.prod(w.shape[1:])), m,
                              _zero(w_zero_value, w.dtype), 1, 0, qnative.split_mode())
        x_zero = _zero(_const(ins[2]) if len(ins) > 2 else None, ins[0].dtype)
        dtype, bias, factor, yz = self.epilogue(ins, m)
        table = None if self.table is None else np.ascontiguousarray(self.table, dtype)
        act = activation_of(node)           # a clamp of the output codes (fuse_code_clamps)
        lo = -_INF if act is None or act.lo is None else float(act.lo)
        hi = _INF if act is None or act.hi is None else float(act.hi)
        geometry = get_prototype("", "Conv").geometry

        def conv(xt, n, c, h, wd, out):
            g = geometry(node, (n, c, h, wd), w.shape)
            (kh, kw), (sh, sw), (dh, dw), pads = g["kernel"], g["strides"], g["dilations"], g["pads"]
            oh = (h + pads[0] + pads[2] - dh * (kh - 1) - 1) // sh + 1
            ow = (wd + pads[1] + pads[3] - dw * (kw - 1) - 1) // sw + 1
            geo = (n, h, wd, c, oh, ow, kh, kw, sh, sw, dh, dw, pads[0], pads[1])
            yt = out((n, oh, ow, m))
            if packed is None:
                q.dwconv(xt, x_zero, taps, geo, yt, bias, factor, yz, lo, hi, 1, _threads())
            elif self.winograd:
                q.winograd(xt, x_zero, packed, m, geo, yt, bias, factor, yz, lo, hi, 1, _threads(), table)
            elif table is None:
                q.conv(xt, x_zero, packed, geo, yt, bias, factor, yz, lo, hi, 1, _threads())
            else:
                q.conv(xt, x_zero, packed, geo, yt, bias, factor, yz, lo, hi, 1, _threads(), table)
            return yt

        def run_nhwc(inputs: list, outputs: list):
            x = np.ascontiguousarray(inputs[0])
            n, h, wd, c = x.shape
            return (conv(x, n, c, h, wd, lambda shape: _out(outputs, shape, dtype)),)

        def run_nchw(inputs: list, outputs: list):
            x = inputs[0]
            n, c, h, wd = x.shape
            yt = conv(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), n, c, h, wd, lambda shape: np.empty(shape, dtype))
            out = _out(outputs, (n, yt.shape[3], yt.shape[1], yt.shape[2]), dtype)
            np.copyto(out, yt.transpose(0, 3, 1, 2))
            return (out,)

        return run_nhwc if self.nhwc else run_nchw


class QLinearConvKernel(_IntegerConv):
    """2-D QLinearConv (group 1 or depthwise, int8 weights) with the bias and the ONNX requantization fused."""

    op_type = "QLinearConv"
    name = "int8 conv"
    w_index = 3
    w_zero_index = 5

    def score(self, node, ins, outs) -> int:
        w = _const(ins[3])
        if not _conv_shape_ok(node, ins[0], w) or w.dtype != np.int8:
            return 0
        if any(_const(ins[i]) is None for i in (1, 2, 4, 5, 6, 7)):
            return 0
        if len(ins) > 8 and ins[8] is not None and _const(ins[8]) is None:
            return 0
        if np.size(_const(ins[2])) != 1 or np.size(_const(ins[6])) != 1 or np.size(_const(ins[7])) != 1:
            return 0
        return 10

    def epilogue(self, ins, m: int) -> tuple:
        factor = np.ascontiguousarray(np.broadcast_to(
            _const(ins[1]).reshape(()) * _const(ins[4]).reshape(-1) / _const(ins[6]).reshape(()), (m,)), np.float32)
        bias = _const(ins[8]) if len(ins) > 8 else None
        bias = None if bias is None else np.ascontiguousarray(bias, np.int32)
        y_zero = _const(ins[7])
        return y_zero.dtype, bias, factor, int(y_zero.reshape(()))


class ConvIntegerKernel(_IntegerConv):
    """2-D ConvInteger (group 1 or depthwise, constant 8-bit weights and zero points): exact int32 sums."""

    op_type = "ConvInteger"
    name = "int8 conv"

    def score(self, node, ins, outs) -> int:
        w = _const(ins[1])
        if not _conv_shape_ok(node, ins[0], w):
            return 0
        x_zero = ins[2] if len(ins) > 2 else None
        if x_zero is not None and (_const(x_zero) is None or np.size(_const(x_zero)) != 1):
            return 0
        w_zero = ins[3] if len(ins) > 3 else None
        if w_zero is not None and (_const(w_zero) is None or np.size(_const(w_zero)) not in (1, w.shape[0])):
            return 0
        return 10

    def epilogue(self, ins, m: int) -> tuple:
        return np.dtype(np.int32), None, None, 0


class QLinearConvNHWC(QLinearConvKernel):
    """QLinearConv in a channels-last region: input 0 and output 0 stored NHWC, no transposes."""

    name = "int8 conv nhwc"
    layout = "NHWC"
    nhwc = True


class ConvIntegerNHWC(ConvIntegerKernel):
    """ConvInteger in a channels-last region: input 0 and output 0 stored NHWC, no transposes."""

    name = "int8 conv nhwc"
    layout = "NHWC"
    nhwc = True


QLinearConvKernel.nhwc_kernel = QLinearConvNHWC()
ConvIntegerKernel.nhwc_kernel = ConvIntegerNHWC()

_KERNELS = {(getattr(k, "domain", ""), k.op_type): k()
            for k in (DynamicQuantizeGemmInteger, MatMulIntegerKernel, MatMulIntegerToFloatKernel,
                      DynamicQuantizeMatMulKernel, QGemmInteger, QAttentionInteger,
                      QLinearMatMulKernel, QLinearConvKernel, ConvIntegerKernel)}


def use_integer_kernels(chosen: list[Chosen]) -> list[Chosen]:
    """The chosen kernels with each quantized product the integer kernels accept swapped for theirs (the
    list unchanged when they are not loaded)."""
    if not any((c.node.domain, c.node.op_type) in _KERNELS for c in chosen) or not qnative.available():
        return chosen
    out = []
    for entry in chosen:
        kernel = _KERNELS.get((entry.node.domain, entry.node.op_type))
        if kernel is not None and kernel.score(entry.node, entry.ins, entry.outs) > 0:
            entry = entry._replace(kernel=kernel)
        out.append(entry)
    return out


def _clamp_table(entry: Chosen) -> tuple[int, int] | None:
    """(lo, hi) when ``entry`` is an ai.nnhal CodeTable that clamps every code to [lo, hi] (a Relu or Relu6
    whose input and output share scale and zero point, as optimizer/qtables.py writes it), else None."""
    node, ins = entry.node, entry.ins
    if node.op_type != "CodeTable" or node.domain != "ai.nnhal" or len(ins) != 2 or ins[1] is None \
            or ins[1].value is None or ins[0] is None or ins[0].dtype not in (np.uint8, np.int8):
        return None
    table = np.asarray(ins[1].value)
    codes = np.arange(256, dtype=np.uint8).view(ins[0].dtype)      # index i: the value whose byte is i
    if table.shape != (256,) or table.dtype != codes.dtype:
        return None
    lo, hi = int(table.min()), int(table.max())
    return (lo, hi) if np.array_equal(table, np.clip(codes, lo, hi)) else None


def fuse_code_clamps(chosen: list[Chosen], external: set[str]) -> list[Chosen]:
    """Each QLinearConv on the integer kernels whose only reader is a clamping CodeTable (``_clamp_table``) with
    the table folded into the requantization's clamp: the same codes, one pass over the output fewer."""
    reads: dict[str, int] = {}
    for entry in chosen:
        for name in entry.node.all_inputs:
            reads[name] = reads.get(name, 0) + 1
    producer = {entry.node.outputs[0]: pos for pos, entry in enumerate(chosen)
                if entry.node.outputs and isinstance(entry.kernel, _IntegerConv) and entry.node.op_type == "QLinearConv"
                and activation_of(entry.node) is None}
    out, dropped = list(chosen), set()
    for pos, entry in enumerate(chosen):
        src = entry.node.inputs[0] if entry.node.inputs else ""
        if src not in producer or src in external or reads.get(src) != 1:
            continue
        bounds = _clamp_table(entry)
        if bounds is None:
            continue
        conv = chosen[producer[src]]
        dtype = entry.ins[0].dtype
        act = Activation("clip", np.asarray(bounds[0], dtype), np.asarray(bounds[1], dtype))
        node = fuse(conv.node, entry.node, outputs=list(entry.node.outputs), activation=act)
        out[producer[src]] = conv._replace(node=node, outs=entry.outs)
        dropped.add(pos)
    return [entry for pos, entry in enumerate(out) if pos not in dropped]


def fuse_code_tables(chosen: list[Chosen], external: set[str]) -> list[Chosen]:
    """Each group-1 QLinearConv on the integer kernels whose only reader is an ai.nnhal CodeTable of 256 codes of
    its output type (a quantized SiLU or another element-wise chain, optimizer/qtables.py; clamping ones are folded
    by :func:`fuse_code_clamps` first) with the table applied in the convolution's write-back (qkernels.c conv's
    ``table``): the same codes, one pass over the output fewer. YOLO's every convolution is followed by one."""

    def produces(entry: Chosen) -> bool:
        return type(entry.kernel) is QLinearConvKernel and entry.kernel.table is None \
            and entry.node.attrs.get("group", 1) == 1

    def fold(conv: Chosen, tail: Chosen) -> Kernel | None:
        table = np.asarray(tail.ins[1].value)
        same = table.dtype == tail.ins[0].dtype == tail.outs[0].dtype
        return QLinearConvKernel(table) if same else None

    return _fold_code_tables(chosen, external, produces, fold)


def fuse_table_tails(chosen: list[Chosen], external: set[str]) -> list[Chosen]:
    """Each QLinearAdd / QLinearMul on its 256 x 256 table (kernels/qlinear_tables.py) whose only reader is an
    ai.nnhal CodeTable (a Relu after a residual Add that rescales, as the int8 precision pass writes it) with the
    CodeTable composed into its table: the same codes, one gather over the output fewer. Runs after the layout
    pass, which chooses the element-wise kernels again for NHWC tensors."""
    return _fold_code_tables(chosen, external,
                             lambda entry: type(entry.kernel) in (QLinearAddTable, QLinearMulTable),
                             lambda table, tail: TailedBinaryTable(table.kernel, tail.ins[1].value))


def _fold_code_tables(chosen: list[Chosen], external: set[str], produces, fold) -> list[Chosen]:
    """The walk shared by :func:`fuse_code_tables` and :func:`fuse_table_tails`: each one-output entry that
    ``produces`` accepts (with no fused activation) whose only reader is an ai.nnhal CodeTable of 256 codes over an
    8-bit input becomes one entry standing for both, on the kernel ``fold(producer, code_table)`` returns (None:
    both left as they are)."""
    reads: dict[str, int] = {}
    for entry in chosen:
        for name in entry.node.all_inputs:
            reads[name] = reads.get(name, 0) + 1
    producer = {entry.node.outputs[0]: pos for pos, entry in enumerate(chosen)
                if len(entry.node.outputs) == 1 and produces(entry) and activation_of(entry.node) is None}
    out, dropped = list(chosen), set()
    for pos, entry in enumerate(chosen):
        node, ins = entry.node, entry.ins
        src = node.inputs[0] if node.inputs else ""
        if src not in producer or src in external or reads.get(src) != 1 or node.op_type != "CodeTable" \
                or node.domain != "ai.nnhal" or len(ins) != 2 or ins[1] is None or ins[1].value is None \
                or np.shape(ins[1].value) != (256,) or ins[0] is None or ins[0].dtype not in (np.uint8, np.int8):
            continue
        head = chosen[producer[src]]
        kernel = fold(head, entry)
        if kernel is None:
            continue
        out[producer[src]] = Chosen(fuse(head.node, node, outputs=list(node.outputs)), kernel, head.ins, entry.outs)
        dropped.add(pos)
    return [entry for pos, entry in enumerate(out) if pos not in dropped]
