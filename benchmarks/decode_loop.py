"""Greedy decode loop with a symbolic past length: tokens/s of nnhal against onnxruntime.

    python benchmarks/decode_loop.py [--tokens 48] [--rounds 2]

The step is tests/device/cpu/kv_decoders.py's Llama-style decoder (d 256, 4 layers, 4 heads, RMSNorm, rotary,
SwiGLU; seeded torch weights, exported at opset 17) with its past K/V axis symbolic, so every token is a new input
shape: nnhal prepares each past length once (docs/concurrency.md, "Input shapes"), onnxruntime runs one plan. The
past grows from 8 by one a token; each engine runs its own loop in turn (one block each per round, a pause
between), and the generated tokens must be the same. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset (the
process re-executes itself without them, nnhal.benchmark.run) and the output says so.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

PAST = 8
LAYERS = 4


def _loop(run, feeds: dict, tokens: int) -> tuple[float, list[int]]:
    """(tokens per second, the generated token ids) of ``tokens`` greedy steps from ``feeds``."""
    f, ids = dict(feeds), []
    start = time.perf_counter()
    for i in range(tokens):
        outs = run(f)
        ids.append(int(np.argmax(outs[0][0, -1])))
        f = {"ids": np.array([[ids[-1]]], np.int64), "position": np.array([[PAST + i + 1]], np.int64)}
        f.update({f"past_{k}": outs[1 + k] for k in range(2 * LAYERS)})
    return tokens / (time.perf_counter() - start), ids


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from nnhal.benchmark.run import _MARK, _reexec_without_openblas_vars

    _reexec_without_openblas_vars(argv, [sys.executable, os.path.abspath(__file__)])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="0 = one per core")
    args = parser.parse_args(argv)
    try:
        import onnxruntime as ort
        import torch  # noqa: F401
    except ImportError:
        print("this benchmark exports its model with torch and compares with onnxruntime", file=sys.stderr)
        return 2
    import nnhal

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "device", "cpu"))
    from kv_decoders import export

    threads = args.threads or os.cpu_count()
    removed = os.environ.get(_MARK) or "they were not set"
    print(f"OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for this run ({removed}); threads {threads}; "
          f"Llama step d 256, {LAYERS} layers, past {PAST} -> {PAST + args.tokens}")
    model, feeds = export(llama=True, d=256, layers=LAYERS, past=PAST, dynamic=True)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    rates: dict[str, list[float]] = {"onnxruntime": [], "nnhal": []}
    same = True
    for _ in range(args.rounds):
        oracle = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        rate, want = _loop(lambda f, o=oracle: o.run(None, f), feeds, args.tokens)
        rates["onnxruntime"].append(rate)
        del oracle      # its threads gone before nnhal's loop
        time.sleep(0.2)
        with nnhal.Session(model, num_thread=threads) as s:
            rate, got = _loop(s.run, feeds, args.tokens)
        rates["nnhal"].append(rate)
        same = same and got == want
        time.sleep(0.2)
    med = {k: statistics.median(v) for k, v in rates.items()}
    for k, v in med.items():
        print(f"{k:12s} {v:8.1f} tokens/s (median of {args.rounds} loops of {args.tokens} tokens)")
    print(f"nnhal / onnxruntime time per token: {med['onnxruntime'] / med['nnhal']:.1f}x; same tokens: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
