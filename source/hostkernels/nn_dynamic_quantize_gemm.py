"""DynamicQuantizeGemm (ai.nnhal), host kernel: per-row (or per row and block) activation scales, float32 BLAS
on integer values (exact sums up to K = 518, rounded at 2^-24 beyond) or on the dequantized blocks."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn, store


def fake_quantize_blocks(x: np.ndarray, block: int, signed: bool) -> np.ndarray:
    """float32 ``x`` (m, k) quantized per row and block of ``block`` columns (int8: peak / 127; uint8: range
    including 0 / 255 with a zero point) and dequantized, in float32: the steps of the cpu device's native
    pass, one for one (a division, rint, clip, a product), so both give the same bits."""
    m, k = x.shape
    rows = x.reshape(m, k // block, block)
    if signed:
        peak = np.abs(rows).max(axis=2, keepdims=True)
        scale = np.where(peak > 0, peak / np.float32(127.0), np.float32(1.0)).astype(np.float32)
        xq = np.clip(np.rint(rows / scale), -127.0, 127.0)
    else:
        lo = np.minimum(rows.min(axis=2, keepdims=True), 0)
        hi = np.maximum(rows.max(axis=2, keepdims=True), 0)
        scale = np.where(hi > lo, (hi - lo) / np.float32(255.0), np.float32(1.0)).astype(np.float32)
        zero = np.rint(-lo / scale)
        xq = np.clip(np.rint(rows / scale) + zero, 0, 255) - zero
    xq *= scale
    return xq.reshape(m, k)


class DynamicQuantizeGemmKernel(Kernel):
    op_type = "DynamicQuantizeGemm"
    # the matrix product; the cpu device's subclass runs it on its pool (device/cpu/kernels/quantized.py)
    matmul = staticmethod(np.matmul)

    def quantize_blocks(self, x: np.ndarray, block: int, signed: bool) -> np.ndarray:
        """fake_quantize_blocks of x (2-D); a device may do it in one pass."""
        return fake_quantize_blocks(x, block, signed)

    def gemm_bias(self, xq: np.ndarray, wt: np.ndarray, out: np.ndarray, bias: np.ndarray | None) -> bool:
        """out = xq @ wt + bias (a float32 vector or None) in one pass where a device can (the contiguous
        float32 ``out`` given); False: it cannot, and the caller computes it."""
        return False

    def prepare(self, node, ins, outs) -> RunFn:
        w, w_scale = ins[1].value, ins[2].value
        bias = ins[3].value if len(ins) > 3 and ins[3] is not None else None
        signed = node.attrs["activation"] == "int8"
        levels = 127.0 if signed else 255.0
        # NOTE: integer values in float32 BLAS: |xq - zx| <= 255, |wq| <= 127, so the sums are exact while
        # K * 255 * 127 < 2^24 (K <= 518); beyond, a sum rounds at 2^-24 of its size, far below the 8-bit
        # step of the activations, and float64 BLAS would double the time of the widest products.
        acc = np.float32
        wt = np.ascontiguousarray(w.astype(acc).T)                  # [K, N]
        w_col = np.asarray(w_scale, np.float32).reshape(1, -1)
        bias32 = None if bias is None else np.asarray(bias, np.float32).reshape(1, -1)
        bias_vec = None if bias32 is None else np.ascontiguousarray(bias32.reshape(-1))
        block = int(node.attrs.get("block") or 0)
        columns = np.asarray(node.attrs["float_columns"] or [], np.int64)
        w_float = np.ascontiguousarray(ins[4].value.T, np.float32) if columns.size else None     # [K, C]
        bias_cols = None if bias32 is None or not columns.size else bias32[:, columns]
        col_sum = wt.sum(axis=0, dtype=np.float64).astype(acc)[None, :]
        if block:
            # NOTE: per-block scales differ along K, so the block sums cannot share one integer product; the
            # blocks are dequantized (8-bit values times their scales, exact in float32 up to 2^-24) and
            # summed by one float32 BLAS call, as a native kernel sums each block in int32 and scales it.
            n, k = w.shape
            wt = np.ascontiguousarray((w.reshape(n, k // block, block).astype(np.float32)
                                       * np.asarray(w_scale, np.float32)[:, :, None]).reshape(n, k).T)

        def run_blocks(inputs: list, outputs: list):
            x = inputs[0]
            xq = self.quantize_blocks(x, block, signed)
            out = outputs[0]
            if out is not None and out.dtype == np.float32 and out.flags.c_contiguous \
                    and self.gemm_bias(xq, wt, out, bias_vec):
                if w_float is not None:
                    out[:, columns] = x @ w_float if bias_cols is None else x @ w_float + bias_cols
                return (out,)
            return finish(x, self.matmul(xq, wt), outputs)

        def finish(x, y, outputs):
            y = y.astype(np.float32, copy=False)
            if bias32 is not None:
                y += bias32
            if w_float is not None:
                y[:, columns] = x @ w_float if bias_cols is None else x @ w_float + bias_cols
            return (store(y, outputs[0]),)

        def run(inputs: list, outputs: list):
            x = inputs[0]
            if signed:
                peak = np.abs(x).max(axis=1, keepdims=True)
                scale = np.where(peak > 0, peak / levels, np.float32(1.0)).astype(np.float32)
                xq = np.rint(x / scale).astype(acc)
                y = self.matmul(xq, wt).astype(np.float32, copy=False)
            else:
                lo = np.minimum(x.min(axis=1, keepdims=True), 0)
                hi = np.maximum(x.max(axis=1, keepdims=True), 0)
                scale = np.where(hi > lo, (hi - lo) / levels, np.float32(1.0)).astype(np.float32)
                zero = np.rint(-lo / scale)
                xq = np.clip(np.rint(x / scale) + zero, 0, 255).astype(acc)
                y = (self.matmul(xq, wt) - zero.astype(acc) * col_sum).astype(np.float32)
            y *= scale
            y *= w_col
            if bias32 is not None:
                y += bias32
            if w_float is not None:
                y[:, columns] = x @ w_float if bias_cols is None else x @ w_float + bias_cols
            return (store(y, outputs[0]),)

        return run_blocks if block else run


IMPLEMENTATIONS = (DynamicQuantizeGemmKernel,)
