"""Throughput of one shared nnhal.Session run from 2 threads against 1 thread.

    python benchmarks/threads.py [--models squeezenet,resnet50,bert] [--seconds 5]

Each configuration runs the same Session (num_thread=1: one BLAS thread per
run, so two runs use the two cores) for about --seconds and prints runs/s,
with the gain of 2 threads over 1 and onnxruntime's figures measured the same
way in the same process (one InferenceSession, intra_op_num_threads=1, called
from 1 and 2 threads). OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for
this process only (they slow numpy's BLAS on these machines); it says so.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time

if __name__ == "__main__" and ("OPENBLAS_CORETYPE" in os.environ or "OPENBLAS_L2_SIZE" in os.environ):
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        os.environ.pop(var, None)
    os.environ["NNHAL_BENCH_UNSET_OPENBLAS"] = "1"
    os.execv(sys.executable, [sys.executable, *sys.argv])   # BLAS reads them at load: start again without


import nnhal  # noqa: E402
from nnhal.models.bert import bert_inputs, build_bert  # noqa: E402
from nnhal.zoo import input_for, resolve  # noqa: E402


def model_and_feeds(name: str):
    if name == "bert":
        model = build_bert(layers=6, hidden=384, heads=12, seq=None)
        return model, bert_inputs(1, 128)
    model = resolve(f"zoo:{name}?weights=random")
    return model, input_for(model)


def throughput(call, threads: int, seconds: float) -> float:
    """Runs per second of ``call`` from ``threads`` threads over about ``seconds``."""
    call()
    count = [0] * threads
    stop = time.perf_counter() + seconds

    def work(k: int) -> None:
        while time.perf_counter() < stop:
            call()
            count[k] += 1

    t0 = time.perf_counter()
    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return sum(count) / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="squeezenet,resnet50,bert")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    if os.environ.get("NNHAL_BENCH_UNSET_OPENBLAS"):
        print("note: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE were unset for this benchmark process")
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
        print("note: onnxruntime is not installed (pip install '.[bench]'): its columns are empty")
    print(f"{'model':<12} {'nnhal 1T/s':>10} {'nnhal 2T/s':>10} {'gain':>6} {'ort 1T/s':>9} {'ort 2T/s':>9} "
          f"{'gain':>6}")
    for name in args.models.split(","):
        model, feeds = model_and_feeds(name)
        with nnhal.Session(model, num_thread=1) as s:
            one = throughput(lambda: s.run(feeds), 1, args.seconds)
            two = throughput(lambda: s.run(feeds), 2, args.seconds)
        row = f"{name:<12} {one:>10.1f} {two:>10.1f} {two / one:>5.2f}x"
        if ort is not None:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
            o1 = throughput(lambda: sess.run(None, feeds), 1, args.seconds)
            o2 = throughput(lambda: sess.run(None, feeds), 2, args.seconds)
            row += f" {o1:>9.1f} {o2:>9.1f} {o2 / o1:>5.2f}x"
        print(row, flush=True)


if __name__ == "__main__":
    main()
