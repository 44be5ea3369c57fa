"""fp16 against fp32 on the cpu device: latency ratio and accuracy, per model.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/fp16.py [--models a,b] [--repeat 15]

The same models and inputs as ``nnhal bench`` (every zoo model with seeded
random weights at batch 1, and the 6-layer BERT encoder at sequence 128). Both
sessions are prepared first; then fp32 and fp16 runs alternate, one each per
round, so a change in the machine's load hits both alike; the table gives the
medians and their ratio. The accuracy column is the largest |fp16 - fp32|
over (atol + rtol * |fp32|) with atol = rtol = 5 * 2^-10, NNAPI's relaxed
tolerance: at most 1 means within it. Never used by tests.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

UNSET = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
TOL = 5 * 2.0 ** -10


def _session(model, precision: str, threads: int):
    import nnhal

    return nnhal.Session(model, precision=precision, num_thread=threads)


def measure(name: str, repeat: int, threads: int) -> dict:
    from nnhal.benchmark.run import load_model

    model, feeds = load_model(name, 1)
    sessions = {p: _session(model, p, threads) for p in ("fp32", "fp16")}
    outputs = {p: s.run(feeds) for p, s in sessions.items()}
    times: dict[str, list[float]] = {"fp32": [], "fp16": []}
    for _ in range(repeat):
        for precision, session in sessions.items():
            start = time.perf_counter()
            session.run(feeds)
            times[precision].append(time.perf_counter() - start)
    for session in sessions.values():
        session.close()
    worst = max(float(np.max(np.abs(h.astype(np.float64) - f) / (TOL + TOL * np.abs(f))))
                for f, h in zip(outputs["fp32"], outputs["fp16"]))
    fp32, fp16 = statistics.median(times["fp32"]), statistics.median(times["fp16"])
    return {"model": name, "fp32_ms": fp32 * 1e3, "fp16_ms": fp16 * 1e3, "ratio": fp16 / fp32, "tol": worst}


def main(argv: list[str] | None = None) -> int:
    from nnhal.benchmark.run import MODELS, ZOO
    from nnhal.zoo import ALIASES, zoo_names

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # every zoo model the onnx wheel ships (nnhal bench's, then the rest), and the BERT encoder
    known = {ALIASES.get(n, n) for n in ZOO}
    every = [m for m in MODELS if m != "bert"] + [n for n in zoo_names() if n not in known] + ["bert"]
    parser.add_argument("--models", default=",".join(every), help="comma-separated (default: all)")
    parser.add_argument("--repeat", type=int, default=15, help="timed runs per precision (after one warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="num_thread of both sessions (0 = one per core)")
    args = parser.parse_args(argv)
    still = [k for k in UNSET if k in os.environ]
    print("OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are " + (f"SET ({', '.join(still)}): run it under "
          "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE" if still else "unset for this run"))
    import nnhal

    nnhal.init()
    cpu = next(d for d in nnhal.devices() if d.name == "cpu")
    print(f"cpu fp16: {cpu.describe().compute.get('fp16', 'as named')}; "
          f"batch 1, threads {args.threads}, median of {args.repeat} alternating runs")
    print(f"{'model':14s} {'fp32 ms':>9s} {'fp16 ms':>9s} {'fp16/fp32':>9s} {'err/tol':>8s}")
    rows = []
    for name in args.models.split(","):
        row = measure(name, args.repeat, args.threads)
        rows.append(row)
        print(f"{name:14s} {row['fp32_ms']:9.2f} {row['fp16_ms']:9.2f} {row['ratio']:9.3f} {row['tol']:8.3f}",
              flush=True)
    print(f"{'geomean':14s} {'':9s} {'':9s} {float(np.exp(np.mean(np.log([r['ratio'] for r in rows])))):9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
