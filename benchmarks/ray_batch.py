"""Throughput of `nnhal batch` on Ray Data (2 actors x 1 thread) against one process (2 threads, 1 thread).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/ray_batch.py [--rows-resnet 32] [--repeat 2]

Every timing is end to end for the same rows read from the same .npz: model
loaded and prepared, every row run, outputs kept (the Ray job also writes its
parquet parts and starts its actors). The local Ray cluster is started once,
before any timing, as a cluster is in practice. Each approach is timed on all
N rows and on the first N/4: throughput is the marginal rate
(3N/4) / (t(N) - t(N/4)), which a data set of many rows sees; the fixed cost
t(N) - N/rate (load, prepare, actor start) is printed beside it. Each timing is
the best of --repeat runs (the machine is shared).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

import nnhal
from nnhal.batch import JobSpec, run_job
from nnhal.models.bert import bert_inputs, build_bert
from nnhal.zoo import input_for, resolve


def single_process(spec: str, rows: dict[str, np.ndarray], threads: int, run_batch: int) -> float:
    """Seconds for one Session of ``threads`` threads to load, prepare and run every row, run_batch at a time."""
    t0 = time.perf_counter()
    with nnhal.Session(resolve(spec), num_thread=threads) as s:
        n = len(next(iter(rows.values())))
        outs = [s.run({k: v[i:i + run_batch] for k, v in rows.items()}) for i in range(0, n, run_batch)]
    assert len(outs) == -(-n // run_batch)
    return time.perf_counter() - t0


def ray_batch(spec: str, npz: str, rows: int, run_batch: int, actors: int, parts_per_actor: int) -> float:
    """Seconds of `nnhal batch` (run_job) over the .npz with ``actors`` actors of one thread each."""
    with tempfile.TemporaryDirectory() as out, np.load(npz) as data:
        npz = str(Path(out).parent / f"{Path(out).name}.npz")
        np.savez(npz, **{k: data[k][:rows] for k in data.files})
        job = JobSpec(model=spec, kind="npz", threads=1, batch_size=None if run_batch == 1 else run_batch)
        per_part = max(run_batch, rows // (actors * parts_per_actor))
        report = run_job(job, npz, out, rows_per_part=per_part, actors=actors)
    os.unlink(npz)
    if report.rows != rows or report.failed:
        raise SystemExit(f"the job ran {report.rows} of {rows} rows; failed: {report.failed[:3]}")
    return report.seconds


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows-resnet", type=int, default=32)
    parser.add_argument("--rows-bert", type=int, default=64)
    parser.add_argument("--bert-batch", type=int, default=4, help="rows per run of the BERT encoder (seq 128)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--parts-per-actor", type=int, default=4)
    parser.add_argument("--out", default=None, help="also write the table to this file")
    args = parser.parse_args(argv)
    import ray

    lines = [f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')} "
             f"OPENBLAS_L2_SIZE={os.environ.get('OPENBLAS_L2_SIZE', '(unset)')}; cores {os.cpu_count()}; "
             f"load average before {os.getloadavg()[0]:.2f} (a shared machine: figures are noisy); "
             f"ray {ray.__version__}"]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    work = Path(tempfile.mkdtemp(prefix="nnhal-ray-bench-"))
    bert_path = work / "bert.onnx"
    onnx.save(build_bert(layers=6, hidden=384, heads=12, seq=None), bert_path)
    cases = []
    resnet = "zoo:resnet50?weights=random"
    resnet_proto = resolve(resnet)
    samples = [input_for(resnet_proto, seed=i) for i in range(args.rows_resnet)]
    cases.append(("resnet50", resnet, 1, {k: np.concatenate([x[k] for x in samples]) for k in samples[0]}))
    cases.append((f"bert L6 H384 seq128 (runs of {args.bert_batch})", str(bert_path), args.bert_batch,
                  bert_inputs(args.rows_bert, 128)))
    header = (f"{'model':36s} {'rows':>5s} {'loop 1 thr':>17s} {'1 proc 2 thr':>17s} {'ray 2x1':>17s}  "
              "ray/best single")
    lines += [f"rows/s marginal (fixed cost s); best of {args.repeat}", header]
    print("\n".join(lines), flush=True)
    for name, spec, run_batch, rows in cases:
        n = len(next(iter(rows.values())))
        npz = work / f"{name.split()[0]}.npz"
        np.savez(npz, **rows)
        quarter = {k: v[:n // 4] for k, v in rows.items()}
        timings = {
            "loop1": [min(single_process(spec, r, 1, run_batch) for _ in range(args.repeat)) for r in (quarter, rows)],
            "proc2": [min(single_process(spec, r, 2, run_batch) for _ in range(args.repeat)) for r in (quarter, rows)],
            "ray": [min(ray_batch(spec, str(npz), m, run_batch, 2, args.parts_per_actor) for _ in range(args.repeat))
                    for m in (n // 4, n)]}
        rates = {k: (n - n // 4) / max(t[1] - t[0], 1e-9) for k, t in timings.items()}
        fixed = {k: t[1] - n / rates[k] for k, t in timings.items()}
        cells = " ".join(f"{rates[k]:8.2f} ({fixed[k]:5.1f}s)" for k in ("loop1", "proc2", "ray"))
        line = f"{name:36s} {n:5d} {cells}  {rates['ray'] / max(rates['loop1'], rates['proc2']):.2f}x"
        end = " ".join(f"{k} {n / t[1]:.2f}" for k, t in timings.items())
        line += f"\n{'':36s} end to end rows/s over all {n} rows: {end}"
        lines.append(line)
        print(line, flush=True)
    lines.append(f"load average after {os.getloadavg()[0]:.2f}")
    print(lines[-1])
    ray.shutdown()
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
