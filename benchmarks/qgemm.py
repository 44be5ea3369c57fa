"""The cpu device's integer kernels (qnative) against numpy float32 matmul, same process, min of N.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/qgemm.py [--repeat 20] [--threads 2]

Shapes: MiniLM's products at batch 1 x 128 tokens (M=128, K=384, N=1536 and K=1536, N=384), the same GEMM
with dynamic per-row quantization of float activations (gemm_dynamic), and ResNet-50's convolutions at
batch 1 as implicit GEMM in NHWC (qnative conv) against the float32 matmul of the same M x K x N (the
im2col is not counted for float, so the float side is flattered). Prints ms (min) and int8 / float32.
Never used by tests.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

UNSET = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")

# (name, n, h, w, c, m, kh, kw, stride): ResNet-50 convolutions at 224^2, batch 1
CONVS = [("res2 1x1 64->256", 1, 56, 56, 64, 256, 1, 1, 1), ("res2 3x3 64", 1, 56, 56, 64, 64, 3, 3, 1),
         ("res3 3x3 128", 1, 28, 28, 128, 128, 3, 3, 1), ("res4 3x3 256", 1, 14, 14, 256, 256, 3, 3, 1),
         ("res4 1x1 1024->256", 1, 14, 14, 1024, 256, 1, 1, 1), ("res5 3x3 512", 1, 7, 7, 512, 512, 3, 3, 1)]


def _best(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1e3


def _row(name: str, t_int: float, t_f32: float) -> None:
    print(f"{name:28s} int8 {t_int:8.3f} ms  f32 {t_f32:8.3f} ms  ratio {t_int / t_f32:5.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    for var in UNSET:
        os.environ.pop(var, None)
    from nnhal.device.cpu import qnative
    if not qnative.available():
        raise SystemExit(f"integer kernels not loaded: {qnative.status().reason}")
    q = qnative.kernels()
    print(f"isa: {q.describe()}; threads {args.threads}")
    rng = np.random.default_rng(0)
    th = args.threads
    for m, k, n in ((128, 384, 1536), (128, 1536, 384), (128, 384, 384), (1024, 384, 1536)):
        a = rng.integers(0, 256, (m, k), dtype=np.uint8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        packed = q.pack_b(b, k, n, None, 0)
        out = np.empty((m, n), np.int32)
        af, bf = a.astype(np.float32), b.astype(np.float32)
        outf = np.empty((m, n), np.float32)
        scale = np.ones(n, np.float32)
        t_int = _best(lambda: q.gemm(a, None, packed, out, None, None, 0, 0.0, 0.0, 0, th), args.repeat)
        t_f32 = _best(lambda: np.matmul(af, bf, out=outf), args.repeat)
        _row(f"gemm {m}x{k}x{n}", t_int, t_f32)
        x = rng.standard_normal((m, k), dtype=np.float32)
        t_dyn = _best(lambda: q.gemm_dynamic(x, 1, packed, outf, None, scale, -np.inf, np.inf, th), args.repeat)
        _row(f"gemm_dynamic {m}x{k}x{n}", t_dyn, t_f32)
    for name, nb, h, w, c, mo, kh, kw, s in CONVS:
        oh, ow = (h + 2 * (kh // 2) - kh) // s + 1, (w + 2 * (kw // 2) - kw) // s + 1
        x = rng.integers(0, 256, (nb, h, w, c), dtype=np.uint8)
        wt = rng.integers(-128, 128, (mo, kh, kw, c), dtype=np.int8)
        packed = q.pack_b(wt, kh * kw * c, mo, None, 1)
        geo = (nb, h, w, c, oh, ow, kh, kw, s, s, 1, 1, kh // 2, kw // 2)
        y = np.empty((nb, oh, ow, mo), np.uint8)
        factor = np.full(mo, 1e-4, np.float32)
        t_int = _best(lambda: q.conv(x, None, packed, geo, y, None, factor, 0, -np.inf, np.inf, 1, th),
                      args.repeat)
        af = rng.standard_normal((nb * oh * ow, kh * kw * c), dtype=np.float32)
        bf = rng.standard_normal((kh * kw * c, mo), dtype=np.float32)
        outf = np.empty((nb * oh * ow, mo), np.float32)
        t_f32 = _best(lambda: np.matmul(af, bf, out=outf), args.repeat)
        _row(f"conv {name}", t_int, t_f32)


if __name__ == "__main__":
    main()
