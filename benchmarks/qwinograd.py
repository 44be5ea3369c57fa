"""A/B of the int8 3x3 stride-1 convolution: qkernels' direct implicit GEMM against its exact integer Winograd
F(2x2, 3x3) (qnative/qwinograd.h), per shape, in one process, alternating, medians of thread CPU time (one
thread) or wall time.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/qwinograd.py [--batch 8] [--threads 1]
        [--rounds 15] [--shapes resnet|yolo|all]

Weights 7-bit ([-64, 64], as nnhal's int8 pass quantizes convolutions on avx2, so the direct kernel takes its
narrow ``vpmaddubsw`` path), uint8 codes, requantized uint8 output with a per-channel factor. The outputs of the
two are compared (they must be equal). Never used by tests.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from nnhal.device.cpu import integer, native, qnative

# (cin, cout, side): ResNet-50's 3x3 stride-1 convolutions, the detector's
SHAPES = {"resnet": [(64, 64, 56), (128, 128, 28), (256, 256, 14), (512, 512, 7)],
          "yolo": [(16, 16, 160), (32, 32, 80), (64, 64, 40), (128, 128, 20)]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--shapes", default="resnet")
    args = ap.parse_args()
    q = qnative.kernels()
    if native.available():
        native.pool_set_threads(args.threads)
    # NOTE: one thread: thread CPU time (less moved by other processes on a loaded machine); more: wall time
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    shapes = SHAPES["resnet"] + SHAPES["yolo"] if args.shapes == "all" else SHAPES[args.shapes]
    print(f"isa {q.isa()}, batch {args.batch}, threads {args.threads}, rounds {args.rounds}")
    print("cin -> cout at side | direct ms | winograd ms | winograd / direct | GMAC/s direct, winograd")
    for c, m, side in shapes:
        rng = np.random.default_rng(c)
        x = rng.integers(0, 256, (args.batch, side, side, c), dtype=np.uint8)
        w = rng.integers(-64, 65, (m, c, 3, 3), dtype=np.int8)
        packed = q.pack_b(np.ascontiguousarray(w.transpose(0, 2, 3, 1)), 9 * c, m, None, 1)
        u = integer.winograd_weights(w)
        geo = (args.batch, side, side, c, side, side, 3, 3, 1, 1, 1, 1, 1, 1)
        factor = rng.uniform(1e-5, 1e-4, m).astype(np.float32)
        xz = np.array([128], np.uint8)
        a, b = (np.empty((args.batch, side, side, m), np.uint8) for _ in range(2))

        def direct():
            q.conv(x, xz, packed, geo, a, None, factor, 3, -np.inf, np.inf, 1, args.threads)

        def wino():
            q.winograd(x, xz, u, m, geo, b, None, factor, 3, -np.inf, np.inf, 1, args.threads)

        direct(), wino()
        assert np.array_equal(a, b), "the outputs differ"
        times = {direct: [], wino: []}
        for _ in range(args.rounds):
            for fn in (direct, wino):
                t0 = clock()
                fn()
                times[fn].append(clock() - t0)
        td, tw = (statistics.median(times[f]) * 1e3 for f in (direct, wino))
        macs = args.batch * side * side * c * m * 9 / 1e9
        print(f"{c} -> {m} at {side} | {td:.3f} | {tw:.3f} | {tw / td:.2f} | {macs / td * 1e3:.1f}, "
              f"{macs / tw * 1e3:.1f}")


if __name__ == "__main__":
    main()
