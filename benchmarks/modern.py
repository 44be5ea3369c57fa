"""Modern architectures: nnhal vs onnxruntime in one run (python benchmarks/modern.py --help).

Models: MobileNetV3-small, EfficientNet-B0, ConvNeXt-tiny, SSDlite320-MobileNetV3 (with its detection
post-processing: per-class top-k, NMS inside an If), ResNet-18, RegNetY-400MF, ViT-B/16, a Whisper-style
audio encoder and Swin-T (shifted window attention), written in plain torch
(benchmarks/models/), seeded, exported once to benchmarks/.cache/ (needs torch; `pip install torch==2.13.0`
takes the CPU wheel). ``--with-zoo`` adds the classic zoo and the BERT encoder of ``nnhal bench`` so the
geometric mean covers everything the acceptance names.

Per model and batch: median latency of each runtime (one runtime after the other, same thread count,
only one session alive at a time: an onnxruntime session's idle threads keep spinning while it lives,
and ShuffleNet at batch 8 took nnhal 92 ms instead of 30 beside one), their ratio;
prepare = session construction + first run (nnhal: Session + prerun + first run; onnxruntime:
InferenceSession + first run); with ``--cache DIR`` also nnhal's prepare from the compiled cache
(a second Session over the same model); peak RSS growth of prepare + two runs, each runtime in a fresh
subprocess. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are removed from this command's environment only
(the script re-executes itself without them) and the output says so. Never used by tests.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

def load(name: str, batch: int):
    """(ModelProto, feeds) of a modern model, or of a zoo model / bert of ``nnhal bench``."""
    from models import registry

    if name in registry.NAMES:
        return registry.load(name, batch)
    from nnhal.benchmark.run import load_model

    return load_model(name, batch)


def timed(fn, warmup: int, repeat: int, budget_s: float) -> dict:
    """Median (min, max) ms of ``repeat`` runs after ``warmup``, stopping early past ``budget_s`` (>= 3 runs)."""
    for _ in range(warmup):
        fn()
    times = []
    start = time.perf_counter()
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
        if len(times) >= 3 and time.perf_counter() - start > budget_s:
            break
    times.sort()
    return {"median": times[len(times) // 2], "min": times[0], "max": times[-1], "runs": len(times)}


def nnhal_session(model, threads: int, cache: str | None):
    import nnhal

    kwargs = {"compiled_cache": cache} if cache else {}
    return nnhal.Session(model, devices=["cpu"], num_thread=threads, **kwargs)


def ort_session(data: bytes, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def source_of(name: str, model):
    """The model as the compiled cache would be given it: the exported .onnx file, else bytes."""
    from models import registry

    # NOTE: the exported files keep a dynamic batch, so registry.load returns the file's model unchanged
    return registry.path(name) if name in registry.NAMES else model.SerializeToString()


def compare(got: list, want: list) -> str:
    import numpy as np

    errs = []
    for g, w in zip(got, want):
        if g.shape != w.shape:
            return f"shapes differ {g.shape} vs {w.shape}"
        if g.size:
            errs.append(float(np.max(np.abs(g.astype(np.float64) - w)) / (np.max(np.abs(w)) + 1e-12)))
    return f"{max(errs, default=0.0):.1e}"


# ------------------------------------------------------------------ memory
def memory_child(runtime: str, name: str, batch: int, threads: int) -> None:
    """In a subprocess: the peak RSS growth (bytes) of creating a session and running twice."""
    from nnhal.benchmark import run

    run.memory_child(runtime, name, batch, threads, loader=load)


def measure_memory(runtime: str, name: str, batch: int, threads: int) -> int | None:
    cmd = [sys.executable, os.path.abspath(__file__), "--memory-child", runtime, name, str(batch), str(threads)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        return int(json.loads(out.stdout.strip().splitlines()[-1])["peak"])
    except Exception:  # noqa: BLE001 - a failed measurement is reported as missing
        return None


# ------------------------------------------------------------------ one row
def measure(name: str, batch: int, args, threads: int) -> dict:
    model, feeds = load(name, batch)
    row: dict = {"model": name, "batch": batch}
    t0 = time.perf_counter()
    s = nnhal_session(model, threads, None)
    t1 = time.perf_counter()
    got = s.run(feeds)
    row["nnhal_prepare_s"] = time.perf_counter() - t0
    row["nnhal_session_s"] = t1 - t0
    row["nnhal"] = timed(lambda s=s: s.run(feeds), args.warmup, args.repeat, args.budget)
    s.close()
    if args.cache:   # a second Session over the model file, prepared from the compiled cache (filled first)
        from nnhal.serializer.cache import load_cached
        from nnhal.serializer.onnx_import import load_onnx

        source = source_of(name, model)
        load_cached(source, args.cache, load_onnx)
        t0 = time.perf_counter()
        s = nnhal_session(source, threads, args.cache)
        s.run(feeds)
        row["nnhal_cached_s"] = time.perf_counter() - t0
        s.close()
    del s
    data = model.SerializeToString()
    t0 = time.perf_counter()
    o = ort_session(data, threads)
    want = o.run(None, feeds)
    row["ort_prepare_s"] = time.perf_counter() - t0
    row["ort"] = timed(lambda o=o: o.run(None, feeds), args.warmup, args.repeat, args.budget)
    del o
    row["ratio"] = row["nnhal"]["median"] / row["ort"]["median"]
    row["check"] = compare(got, want)
    if not args.no_memory:
        row["nnhal_mb"] = measure_memory("nnhal", name, batch, threads)
        row["ort_mb"] = measure_memory("ort", name, batch, threads)
    return row


def _mb(b) -> str:
    return "-" if b is None else f"{b / 2**20:.0f}"


def render(rows: list[dict], header: list[str]) -> str:
    # prep s = session + first run; prep-run s and cached-run s (a second Session, prepared from the compiled
    # cache) subtract one steady run: what preparing itself costs
    cols = ["model", "batch", "nnhal ms", "ort ms", "ratio", "prep s", "prep-run s", "ort prep s", "cached-run s",
            "nnhal MB", "ort MB", "mem", "max rel err"]
    table = [cols]
    for r in rows:
        if "skip" in r:
            table.append([r["model"], str(r["batch"]), "skipped: " + r["skip"]] + [""] * (len(cols) - 3))
            continue
        mem = (f"{r['nnhal_mb'] / r['ort_mb']:.2f}" if r.get("nnhal_mb") and r.get("ort_mb") else "-")
        table.append([r["model"], str(r["batch"]), f"{r['nnhal']['median']:.1f}", f"{r['ort']['median']:.1f}",
                      f"{r['ratio']:.2f}", f"{r['nnhal_prepare_s']:.2f}",
                      f"{r['nnhal_prepare_s'] - r['nnhal']['median'] / 1e3:.2f}", f"{r['ort_prepare_s']:.2f}",
                      f"{r['nnhal_cached_s'] - r['nnhal']['median'] / 1e3:.2f}" if "nnhal_cached_s" in r else "-",
                      _mb(r.get("nnhal_mb")), _mb(r.get("ort_mb")), mem, r["check"]])
    done = [t for t in table[1:] if not t[2].startswith("skipped")]
    widths = [max(len(t[i]) for t in [cols] + done) for i in range(len(cols))]
    lines = list(header) + [""]
    for k, t in enumerate(table):
        if t[2].startswith("skipped"):
            lines.append(f"{t[0]:<{widths[0]}}  {t[1]:>{widths[1]}}  {t[2]}")
            continue
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(t, widths))))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    ok = [r for r in rows if "skip" not in r]
    lines.append("")
    for batch in sorted({r["batch"] for r in ok}):
        sel = [r["ratio"] for r in ok if r["batch"] == batch]
        lines.append(f"geometric mean nnhal/ort at batch {batch}: {math.exp(sum(map(math.log, sel)) / len(sel)):.2f}"
                     f" over {len(sel)} models")
    if ok:
        lines.append(f"geometric mean nnhal/ort, all rows: "
                     f"{math.exp(sum(math.log(r['ratio']) for r in ok) / len(ok)):.2f}")
        worst = max(ok, key=lambda r: r["ratio"])
        lines.append(f"worst ratio: {worst['model']} batch {worst['batch']} {worst['ratio']:.2f}; "
                     f"slowest nnhal prepare: {max(r['nnhal_prepare_s'] for r in ok):.2f} s")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--memory-child"]:
        memory_child(argv[1], argv[2], int(argv[3]), int(argv[4]))
        return 0
    from nnhal.benchmark.run import _reexec_without_openblas_vars

    _reexec_without_openblas_vars(argv, [sys.executable, os.path.abspath(__file__)])
    from models import registry

    p = argparse.ArgumentParser(prog="benchmarks/modern.py", description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(registry.NAMES))
    p.add_argument("--with-zoo", action="store_true", help="add the zoo models and bert of `nnhal bench`")
    p.add_argument("--batch", default="1,8")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--budget", type=float, default=10.0, help="seconds of timed runs per runtime and row (>= 3 runs)")
    p.add_argument("--cache", default=None, help="a compiled-cache directory: also time prepare from it")
    p.add_argument("--no-memory", action="store_true")
    p.add_argument("--out", default=None, help="also write the table to this file")
    args = p.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    if args.with_zoo:
        from nnhal.benchmark.run import MODELS

        models += [m for m in MODELS if m not in models]
    import numpy as np  # noqa: F401  (OpenBLAS loads under the cleaned environment)
    import onnxruntime

    from nnhal.benchmark.run import environment_lines

    header = [f"benchmarks/modern.py: {args.threads} thread(s), median of up to {args.repeat} runs "
              f"(at most {args.budget:.0f} s each) after {args.warmup} warm-up; onnxruntime {onnxruntime.__version__}"]
    header += environment_lines()
    for line in header:
        print(line, flush=True)
    rows = []
    for name in models:
        for batch in [int(b) for b in args.batch.split(",") if b]:
            try:
                row = measure(name, batch, args, args.threads)
            except Exception as exc:  # noqa: BLE001 - a model that cannot run is reported, with the reason
                row = {"model": name, "batch": batch, "skip": f"{type(exc).__name__}: {str(exc).splitlines()[0][:150]}"}
                print(f"{name} batch {batch}: skipped ({row['skip']})", flush=True)
            else:
                print(f"{name} batch {batch}: nnhal {row['nnhal']['median']:.1f} ms, ort "
                      f"{row['ort']['median']:.1f} ms, "
                      f"ratio {row['ratio']:.2f}, prepare {row['nnhal_prepare_s']:.2f} s", flush=True)
            rows.append(row)
    text = render(rows, header)
    print()
    print(text, end="")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
