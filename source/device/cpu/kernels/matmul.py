"""MatMul on the cpu device, fast: the host reference's product (hostkernels/op_matmul.py) on the pool, a
float32 product with a constant bias and activation by the native GEMM, and a fused epilogue blockwise.

The CPU plan may fuse what follows a MatMul into its node (never under NNHAL_CPU_REFERENCE=1): the
FusedNode's ``epilogue`` (EpilogueOp records, hostkernels/fused.py) applies element-wise Add/Mul/Div/Sub
by further node inputs (bias, scale, mask, residual) in place on the product, possibly ended by a Gelu
step, an exact float32 Gelu or the native tanh one (GeluTanh); with a Gelu, a stacked A times a matrix B
is one GEMM, then the epilogue and the Gelu run over cache-sized row blocks of the product.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from nnhal.device.cpu import native, parallel
from nnhal.device.cpu.kernels._conv_nhwc import act_record
from nnhal.device.cpu.kernels._gates import fused
from nnhal.device.cpu.kernels.gelu import gelu_chunk, gelu_inplace, gelu_tanh_inplace
from nnhal.graph.derived import derive
from nnhal.hostkernels import _blocks, _scratch, op_matmul
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.fused import Activation, activation_of, epilogue_of

_UFUNCS = op_matmul.UFUNCS
_F32 = np.dtype(np.float32)
# the native activation of a Gelu epilogue step
_GELU_ACTS = {"Gelu": "gelu", "GeluTanh": "gelu_tanh"}
# NOTE: products of at most this many rows run as one BLAS GEMV per row: OpenBLAS's SGEMM (numpy's and the
# native pool's) takes 3-4x a GEMV's time on one row (1x256 @ 256x1024: 96 us against 26, 1x1024 @ 1024x256:
# 67 against 19, one thread) and ~1.5x on two; from 4 rows on the GEMM is as fast (loaded 2-core Zen 3)
GEMV_ROWS = 2
# the largest constant B (bytes) a few-row product packs in column panels for the native GEMV (gemm_first): the
# packed copy is a second copy of the weight, measured faster only for matrices read from the caches (gpt_kv's
# 0.25-2 MiB); a larger one (a language model's vocabulary head) keeps the BLAS GEMV and its one copy
PACK_MAX_BYTES = 16 << 20
# elements of the product per epilogue + Gelu block (the dozen passes of the Gelu stay in L2)
BLOCK = 1 << 16


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """op_matmul.matmul with the product on the cpu device's pool (parallel.matmul)."""
    return op_matmul.matmul(a, b, out, parallel.matmul)


class MatMulFast(Kernel):
    op_type = "MatMul"
    name = "fast"
    fuse_activation = True   # a Relu/Clip fused by the CPU plan runs in place on the result

    def prepare(self, node, ins, outs) -> RunFn:
        epilogue = epilogue_of(node)
        gelu = _GELU_ACTS.get(epilogue[-1].op) if epilogue else None
        ops = tuple((_UFUNCS[step.op], step.input) for step in (epilogue[:-1] if gelu else epilogue))
        if gelu:
            return fused(_native_first(_gelu_run(ops, outs[0], gelu), ops, ins, outs[0], gelu), node)
        if _small_stack(ins, outs[0]):
            # NOTE: attention's score and value products (a stack of small matrices times a stack): parallel.matmul
            # hands them to numpy's matmul as one part anyway; called here directly, five Python frames and their
            # checks fewer (gpt_kv's (1, 4, 1, 64) @ (1, 4, 64, 65), K a transposed view: 2.8 against 4.4 us a
            # step, min of 20000 alternating in one process, loaded machine)
            def run_small(inputs, outputs):
                y = np.matmul(inputs[0], inputs[1], out=outputs[0])
                for ufunc, k in ops:
                    ufunc(y, inputs[k], out=y)
                return (y,)

            return fused(run_small, node)
        blocks = tuple(_block_of(ins[k], outs[0]) for _, k in ops)

        def run(inputs, outputs):
            y = matmul(inputs[0], inputs[1], outputs[0])
            flat = y.reshape(-1) if y.flags.c_contiguous else None
            for (ufunc, k), block in zip(ops, blocks):
                if block is not None and flat is not None:
                    _blocks.blockwise(ufunc, flat, block, flat)
                else:
                    ufunc(y, inputs[k], out=y)
            return (y,)

        # NOTE: a fused activation (a feed-forward's linear1 + ReLU, SiLU) runs in the native GEMM's epilogue,
        # each thread on its rows while they are in cache; the fallbacks (fused(run)) apply it as a pass
        return _native_first(fused(run, node), ops, ins, outs[0], activation_of(node))

    def score(self, node, ins, outs) -> int:
        return 2                 # above the reference's 1: the same nodes, faster


def _small_stack(ins, out) -> bool:
    """A product of static shapes whose B is a computed stack (rank 3 or more, not a constant) and small enough
    for one part (parallel.small_product)."""
    a, b = ins[0], ins[1] if len(ins) > 1 else None
    if a is None or b is None or b.value is not None or not (a.static and b.static and out.static) \
            or len(b.shape) < 3 or len(a.shape) < 2:
        return False
    return parallel.small_product(int(np.prod(out.shape, dtype=np.int64)) * int(a.shape[-1]))


def _native_first(run: RunFn, ops, ins, out_info, act: str | Activation | None) -> RunFn:
    """``run`` preceded by the native pool's GEMM with its bias and activation (parallel.gemm: each thread
    its rows' product, bias and ``act`` while in cache) when the epilogue is at most a constant bias of
    the product's width and the operands are float32 matrices it can read (a stacked A times a matrix B
    flattened to one), or as GEMVs (_gemv_rows) when A has at most GEMV_ROWS rows; ``run`` itself otherwise.
    ``act`` as gemm_first takes it; ``run`` must apply it too (it runs whenever the native GEMM cannot)."""
    if out_info.dtype != np.float32 or out_info.shape is None or not out_info.shape:
        return run
    width = out_info.shape[-1]
    bias, rest = None, ops
    if ops:
        ufunc, k = ops[0]
        v = ins[k].value if ins[k] is not None else None
        if ufunc is np.add and v is not None and v.size == width and v.shape[-1] == width and v.dtype == np.float32:
            bias, rest = np.ascontiguousarray(v.reshape(-1)), ops[1:]
    if len(rest) > 1 or (rest and act is not None):
        return run
    w = ins[1].value if len(ins) > 1 and ins[1] is not None else None
    return gemm_first(run, w, bias, tuple(out_info.shape), act, False, rest)


def gemm_first(run: RunFn, w: np.ndarray | None, bias: np.ndarray | None, shape: tuple,
               act: str | Activation | None, fixed_b: bool, rest: tuple = ()) -> RunFn:
    """``run`` preceded by act(A @ B + bias) into the float32 output of ``shape``, A = inputs[0] flattened to
    a matrix: GEMVs for a few rows, else the native pool's GEMM (prepared once when B is the constant ``w``).
    ``act``: a native activation kind ("gelu", "gelu_tanh"), the Activation the plan fused into the node, or
    None. ``fixed_b``: B is always ``w`` (a Gemm's packed weight), else inputs[1]. ``rest``: one more epilogue
    step (ufunc, input) after the bias (a residual add), applied on the product in place; never with ``act``."""
    width = shape[-1]
    record = native.make_act(act) if act is None or isinstance(act, str) else act_record(act)
    static = all(isinstance(d, (int, np.integer)) for d in shape)
    rows = int(np.prod(shape[:-1], dtype=np.int64)) if static else GEMV_ROWS + 1
    # a constant float32 B: its GEMM prepared once (the buffers of B and the bias held and checked now); for
    # products of at most GEMV_ROWS rows also packed in column panels (kernels.c nn_gemv.h: one contiguous
    # read of B per column range; gpt_kv's 1x256 @ 256x1024 from L3 took 80 us by the BLAS GEMV, 23 packed)
    # NOTE: the prepared GEMM (its packed panels) depends only on w, the bias, the activation and whether to
    # pack: one per graph handle, shared by every prepared input shape (nnhal.graph.derived; a decode step
    # re-prepared for each past length packed every projection anew, 0.7 ms each)
    pack = rows <= GEMV_ROWS and isinstance(w, np.ndarray) and w.nbytes <= PACK_MAX_BYTES
    prepared = derive("cpu.gemm", (w, bias, record), pack, partial(native.Gemm, w, bias, record, pack)) \
        if native.available() and isinstance(w, np.ndarray) and w.ndim == 2 and w.dtype == np.float32 \
        and (w.flags.c_contiguous or w.flags.f_contiguous) else None

    def run_native(inputs, outputs):
        a, b, y = inputs[0], w if fixed_b else inputs[1], outputs[0]
        if b.ndim == 2 and a.ndim >= 2 and y is not None and y.flags.c_contiguous and y.shape == shape:
            a2, y2 = a.reshape(-1, a.shape[-1]), y.reshape(-1, width)
            if a2.shape[0] <= GEMV_ROWS and (act is None or record is not None):
                if prepared is not None and b is w and native_rows(a2):
                    # NOTE: one native call for the GEMVs (kernels.c nn_gemm_task by columns), bias and
                    # activation: numpy's GEMV per row and the bias add were 3 calls of a few us each
                    prepared.run(a2, y2, _gemv_parts(y2.size * a2.shape[1], y2.shape[1]), 1, 1)
                else:
                    _gemv_rows(a2, b, y2, bias, record)
                for ufunc, k in rest:
                    ufunc(y, inputs[k], out=y)
                return (y,)
            if np.shares_memory(a2, a) and parallel.gemm(a2, b, y2, bias, record,
                                                         prepared=prepared if b is w else None):
                # NOTE: a residual add after the bias (a transformer's second FFN product) in one pass over
                # the product: with it, the product had run numpy's GEMM and the bias as another pass
                # (enc_dec's linear2 products)
                for ufunc, k in rest:
                    ufunc(y, inputs[k], out=y)
                return (y,)
        return run(inputs, outputs)

    if prepared is None:
        return run_native
    depth, macs = w.shape[0], rows * width * w.shape[0]

    def bind(inputs, outputs):
        # NOTE: a planned step (straight.bind): the prepared native call on the fixed views, its split chosen once
        # (what run_rows and run_native choose per call); a residual add after it on the same fixed operands
        a, y = inputs[0], outputs[0]
        if not static or y is None or (act is not None and record is None) or not (fixed_b or inputs[1] is w) \
                or a.dtype != _F32 or y.dtype != _F32 or a.size != rows * depth or y.shape != shape \
                or not (a.flags.c_contiguous and y.flags.c_contiguous):
            return None
        a2, y2 = a.reshape(rows, depth), y.reshape(rows, width)
        if rows <= GEMV_ROWS:
            call = partial(prepared.run, a2, y2, _gemv_parts(macs, width), 1, 1)
        else:
            split = parallel.gemm_split(rows, depth, width, record is not None or bias is not None) \
                if parallel.native_pool() else None
            if split is None:
                return None
            call = partial(prepared.run, a2, y2, split[0], 1, split[1])
        if not rest:
            return call
        operands = tuple((ufunc, inputs[k]) for ufunc, k in rest)

        def bound() -> None:
            call()
            for ufunc, operand in operands:
                ufunc(y, operand, out=y)

        return bound

    run_native.bind = bind
    if rows > GEMV_ROWS or (act is not None and record is None):
        return run_native

    def run_rows(inputs, outputs):
        # NOTE: a decoder step's projections (a few rows times the prepared constant B): the planned contiguous
        # output and a contiguous float32 A go straight to the one native call; the general checks of
        # run_native took ~1.4 us of Python a call (29 of them in gpt_kv's step), this ~0.6
        a, y = inputs[0], outputs[0]
        if y is not None and y.flags.c_contiguous and a.flags.c_contiguous and a.dtype == _F32 \
                and a.size == rows * depth and y.shape == shape and (fixed_b or inputs[1] is w):
            prepared.run(a.reshape(rows, depth), y.reshape(rows, width), _gemv_parts(macs, width), 1, 1)
            for ufunc, k in rest:
                ufunc(y, inputs[k], out=y)
            return (y,)
        return run_native(inputs, outputs)

    run_rows.bind = bind
    return run_rows


def native_rows(a: np.ndarray) -> bool:
    """The float32 matrices (the last two axes) of ``a`` are ones the native GEMM (BLAS) reads in place: unit
    stride along the rows, rows at least a row apart (a valid leading dimension)."""
    return a.dtype == np.float32 and a.strides[-1] == 4 and (a.shape[-2] <= 1 or a.strides[-2] >= 4 * a.shape[-1])


def _gemv_parts(macs: int, n: int) -> int:
    """Parts (column ranges) of a few rows' GEMVs on the native pool: one when the pool is off (a serial
    plan), else as parallel.native_parts gives for the multiply-adds, in columns of at least 64."""
    return parallel.native_parts(parallel.gemm_work(macs), n // 64) if parallel.native_pool() else 1


def _gemv_rows(a: np.ndarray, b: np.ndarray, y: np.ndarray, bias: np.ndarray | None, record) -> None:
    """y = act(a @ b + bias) for the few rows of the matrix ``a`` (a decoder's one token) into the contiguous
    matrix ``y``, one BLAS GEMV per row."""
    for r in range(a.shape[0]):
        np.matmul(a[r], b, out=y[r])
    if bias is not None:
        np.add(y, bias, out=y)
    if record is not None:
        native.activation(y, y, record, 1)


def _block_of(operand, out) -> np.ndarray | None:
    """The repeated block (kernels/_blocks.py) of a constant epilogue operand that is a vector along the
    product's last axis (a bias: 128x1536 + 1536 in 16 us instead of 22), in the product's dtype; else
    None, and the ufunc broadcasts the operand itself (a scalar: numpy's add/multiply/divide by a scalar
    are fast, only maximum/minimum are not)."""
    v = operand.value if operand is not None else None
    if v is None or out.dtype is None or out.shape is None or v.dtype != out.dtype or v.size == 1:
        return None
    if v.ndim >= 1 and v.shape[-1] == out.shape[-1] and v.size == v.shape[-1]:
        return _blocks.tiled(np.ascontiguousarray(v.reshape(-1)))
    return None


def _gelu_run(ops, out_info, act: str) -> RunFn:
    """The product, its epilogue ``ops`` and the Gelu (``act``: "gelu" exact, "gelu_tanh" native only) in
    blocks of rows over the pool."""
    shape, dtype = tuple(out_info.shape), out_info.dtype
    tanh = act == "gelu_tanh"
    n = shape[-1]
    rows_per_block = max(1, BLOCK // max(1, n))
    # NOTE: the Gelu's three temporaries live in this thread's scratch: allocated per block (256 KB each,
    # past malloc's mmap threshold) they were page-faulted in again every time; bias + Gelu of ViT's
    # 197x3072 product took 4.2 ms that way, 1.8 ms as one pass over the whole product, 1.5 ms this way
    parts = (((rows_per_block * n,), np.dtype(np.float32)),) * 3
    _scratch.reserve(_scratch.nbytes_of(*parts))

    def run(inputs, outputs):
        a, b = inputs[0], inputs[1]
        y = outputs[0] if outputs[0] is not None else np.empty(shape, dtype)
        y = matmul(a, b, y)
        if not y.flags.c_contiguous:
            for ufunc, k in ops:
                ufunc(y, inputs[k], out=y)
            gelu_tanh_inplace(y) if tanh else gelu_inplace(y)
            return (y,)
        y2 = y.reshape(-1, n)
        operands = [(ufunc, np.broadcast_to(inputs[k], shape).reshape(-1, n)) for ufunc, k in ops]
        # NOTE: one GEMM for the whole product, then the epilogue and Gelu per block of rows while it is in
        # cache. GEMMs of 256-row blocks (the former scheme) thread badly: at 2 threads, ConvNeXt's
        # 3136x96 @ 96x384 + Gelu took 36-200 ms in 256..1024-row blocks against 7.8 ms this way, and
        # ViT's 1576x768 @ 768x3072 + Gelu 121-191 ms against 108 (a loaded machine, min of 7 runs).
        # The blocks are spread over the pool (parallel.py), each thread with its own temporaries.
        def blocks(r0: int, r1: int) -> None:
            tmp, xc, t = _scratch.scratch(*parts)
            for lo in range(r0, r1, rows_per_block):
                hi = min(r1, lo + rows_per_block)
                ys = y2[lo:hi]
                for ufunc, operand in operands:
                    ufunc(ys, operand[lo:hi], out=ys)
                flat, k = ys.reshape(-1), ys.size
                if tanh:
                    gelu_tanh_inplace(flat)
                else:
                    gelu_chunk(flat, flat, tmp[:k], xc[:k], t[:k])

        parallel.for_ranges(y2.shape[0], y2.size * 8, blocks, rows_per_block)
        return (y,)

    return run


IMPLEMENTATIONS = (MatMulFast,)
