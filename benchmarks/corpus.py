"""The corpus benchmark: nnhal against onnxruntime on 30+ architectures it was not tuned on
(python benchmarks/corpus.py --help).

Models: benchmarks/corpus/ (built in torch with seeded weights, exported once to benchmarks/.cache/corpus/,
batch 1), split into a TUNED and an UNTUNED half fixed in corpus/registry.py by a seeded shuffle before any
tuning; the two halves are reported separately.

Per model, three sessions at batch 1 and ``--threads`` threads each: nnhal fp32, onnxruntime, nnhal fp16.
Their runs alternate in blocks (``--rounds`` rounds; in each, one block per engine, one engine after the
other with a pause before each block, so onnxruntime's spinning workers have gone idle and a change of the
machine's load hits every engine alike); each engine's figure is the median of all its runs. fp16 is
measured against fp32 in a block of its own, run by run: fp32 and fp16 alternate within the block (the order
swapping every pair), and fp16/fp32 is the median of the per-pair ratios, so a disturbance of the machine that
lasts longer than one pair hits both sides of it. Columns: nnhal/ort, fp16/fp32 (nnhal), the largest error of
nnhal fp32 and fp16 against onnxruntime relative to
the output's largest magnitude, and where nnhal's fp32 run time goes (``Profile.coverage``: "reference"
implementations, layout conversions, pure data movement, control-flow bookkeeping). The end lists each
half's geometric mean and worst ratio, and the worst offending ops across the corpus.
OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are removed from this command's environment only (the script
re-executes itself without them) and the output says so. Never used by tests.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# fp32 against onnxruntime: both sum in float32 in other orders; 1e-3 of the output's range bounds the
# reassociation error of the deepest corpus model (a few hundred terms per dot product, dozens of layers)
FP32_TOL = 1e-3
# fp16 storage: every stored tensor rounds to 11 bits (2^-11 relative) once per layer; 3e-2 bounds ~20 layers
FP16_TOL = 3e-2


def rel_error(got: list, want: list) -> float:
    import numpy as np

    worst = 0.0
    for g, w in zip(got, want):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if g.shape != w.shape:
            return math.inf
        if w.size:
            worst = max(worst, float(np.max(np.abs(g - w)) / (np.max(np.abs(w)) + 1e-12)))
    return worst


def block(fn, budget: float, most: int) -> tuple[list[float], list[float]]:
    """Wall and process-CPU milliseconds of runs of ``fn`` for about ``budget`` seconds (at least 2, at most
    ``most``)."""
    times, cpu = [], []
    start = time.perf_counter()
    while len(times) < most and (len(times) < 2 or time.perf_counter() - start < budget):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    return times, cpu


def paired(first, second, budget: float, most: int) -> list[tuple[float, float]]:
    """(first ms, second ms) of pairs of runs of ``first`` and ``second`` for about ``budget`` seconds (at least
    3 pairs, at most ``most``), run back to back; the order within a pair swaps every pair, so neither side
    always runs right after the other (a warm cache, a scheduler slice)."""
    pairs: list[tuple[float, float]] = []
    start = time.perf_counter()
    while len(pairs) < most and (len(pairs) < 3 or time.perf_counter() - start < budget):
        t = {}
        for key, fn in ((0, first), (1, second)) if len(pairs) % 2 == 0 else ((1, second), (0, first)):
            t0 = time.perf_counter()
            fn()
            t[key] = (time.perf_counter() - t0) * 1e3
        pairs.append((t[0], t[1]))
    return pairs


def paired_ratio(pairs: list[tuple[float, float]]) -> float:
    """The median over pairs of second / first: the ratio of two engines measured in the same moments."""
    return statistics.median(b / a for a, b in pairs)


def measure(name: str, args) -> dict:
    import onnxruntime as ort
    from corpus import registry

    import nnhal

    model, feeds = registry.load(name)
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    engines = {
        "nnhal": nnhal.Session(model, devices=["cpu"], num_thread=args.threads),
        "ort": ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]),
        "fp16": nnhal.Session(model, devices=["cpu"], num_thread=args.threads, precision="fp16"),
    }
    calls = {"nnhal": lambda: engines["nnhal"].run(feeds), "ort": lambda: engines["ort"].run(None, feeds),
             "fp16": lambda: engines["fp16"].run(feeds)}
    outputs = {k: fn() for k, fn in calls.items()}      # also the warm-up run
    times: dict[str, list[float]] = defaultdict(list)
    cpu: dict[str, list[float]] = defaultdict(list)
    pairs: list[tuple[float, float]] = []
    for _ in range(args.rounds):
        for key in ("nnhal", "ort"):
            time.sleep(args.pause)
            wall, used = block(calls[key], args.budget, args.most)
            times[key] += wall
            cpu[key] += used
        time.sleep(args.pause)
        # NOTE: fp16 against fp32 run by run in one block (not two blocks' medians): the ratio is the quantity
        # that must hold on every model, and separate blocks on a loaded machine read 0.7-2.1 on one model
        pairs += paired(calls["nnhal"], calls["fp16"], args.budget, 2 * args.most)
    times["fp16"] = [b for _, b in pairs]
    med = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}
    best16 = min(b for _, b in pairs) / min(a for a, _ in pairs)
    work = {k: statistics.median(v) for k, v in cpu.items()}
    prof = engines["nnhal"].profile(feeds, runs=args.profile_runs, warmup=0)
    prof16 = engines["fp16"].profile(feeds, runs=args.profile_runs, warmup=0)
    casts = sum(n.ms for n in prof16.nodes if n.op in ("Cast", "CastLike")) / max(prof16.accounted_ms, 1e-9)
    for key in ("nnhal", "fp16"):
        engines[key].close()
    row = {"model": name, "half": registry.half_of(name), "family": registry.family(name),
           "nnhal_ms": med["nnhal"], "ort_ms": med["ort"], "fp16_ms": med["fp16"],
           "ratio": med["nnhal"] / med["ort"], "fp16_ratio": paired_ratio(pairs),
           "best_ratio": best["nnhal"] / best["ort"], "best_fp16_ratio": best16,
           "cpu_ratio": work["nnhal"] / max(work["ort"], 1e-6),
           "err32": rel_error(outputs["nnhal"], outputs["ort"]), "err16": rel_error(outputs["fp16"], outputs["ort"]),
           "coverage": prof.coverage(), "offenders": prof.offenders()[:8], "cast16": casts}
    return row


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def render(rows: list[dict], header: list[str]) -> str:
    from nnhal.profiling import CONTROL, LAYOUT, MOVEMENT, REFERENCE

    cols = ["model", "half", "family", "nnhal/ort", "best", "cpu", "fp16/fp32", "best", "err32", "err16",
            "ref", "layout", "move", "ctrl",
            "cast16"]
    lines = list(header) + [""]
    table = [cols]
    for r in rows:
        if "skip" in r:
            continue
        cov = r["coverage"]
        flag32 = "" if r["err32"] <= FP32_TOL else "!"
        flag16 = "" if r["err16"] <= FP16_TOL else "!"
        table.append([r["model"], r["half"], r["family"], f"{r['ratio']:.2f}", f"{r['best_ratio']:.2f}",
                      f"{r['cpu_ratio']:.2f}",
                      f"{r['fp16_ratio']:.2f}", f"{r['best_fp16_ratio']:.2f}",
                      f"{r['err32']:.1e}{flag32}", f"{r['err16']:.1e}{flag16}"]
                     + [f"{cov[c]:.1%}" for c in (REFERENCE, LAYOUT, MOVEMENT, CONTROL)] + [f"{r['cast16']:.1%}"])
    widths = [max(len(t[i]) for t in table) for i in range(len(cols))]
    for k, t in enumerate(table):
        lines.append("  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(t, widths))))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        if "skip" in r:
            lines.append(f"{r['model']}: skipped: {r['skip']}")
    lines.append("")
    lines.append(f"errors: max |nnhal - ort| / max |ort| over the outputs; '!' marks fp32 above {FP32_TOL:g}, "
                 f"fp16 above {FP16_TOL:g}. ref/layout/move/ctrl: share of nnhal's fp32 run time (nnhal profile); "
                 "cast16: Cast's share of the fp16 run. "
                 "nnhal/ort: ratio of medians; fp16/fp32: median of the ratios of paired runs (fp32 and fp16 "
                 "alternating in one block); best: ratios of the fastest runs (under shared load "
                 "the runs least disturbed by other processes); cpu: ratio of the median process CPU time per run "
                 "(every thread's, spinning included: what each engine burns, whatever the machine's load)")
    ok = [r for r in rows if "skip" not in r]
    for half in ("tuned", "untuned", "heldout"):
        sel = [r for r in ok if r["half"] == half]
        if not sel:
            continue
        worst = max(sel, key=lambda r: r["ratio"])
        worst16 = max(sel, key=lambda r: r["fp16_ratio"])
        worst_ref = max(sel, key=lambda r: r["coverage"][REFERENCE])
        worst_lay = max(sel, key=lambda r: r["coverage"][LAYOUT])
        best = max(sel, key=lambda r: r["best_ratio"])
        lines.append(f"{half:>7} half ({len(sel)} models): geomean nnhal/ort {geomean([r['ratio'] for r in sel]):.2f}, "
                     f"worst {worst['ratio']:.2f} ({worst['model']}); of the fastest runs: geomean "
                     f"{geomean([r['best_ratio'] for r in sel]):.2f}, "
                     f"worst {best['best_ratio']:.2f} ({best['model']}); "
                     f"cpu time geomean {geomean([r['cpu_ratio'] for r in sel]):.2f}")
        lines.append(f"{'':>7} fp16/fp32 geomean "
                     f"{geomean([r['fp16_ratio'] for r in sel]):.2f}, worst {worst16['fp16_ratio']:.2f} "
                     f"({worst16['model']}); max reference share {worst_ref['coverage'][REFERENCE]:.1%} "
                     f"({worst_ref['model']}), max layout share {worst_lay['coverage'][LAYOUT]:.1%} "
                     f"({worst_lay['model']})")
    if ok:
        lines.append(f"    all ({len(ok)} models): geomean nnhal/ort {geomean([r['ratio'] for r in ok]):.2f}, of the "
                     f"fastest runs {geomean([r['best_ratio'] for r in ok]):.2f}")
    # the worst offending ops: summed shares over the corpus (each model's run time weighs the same)
    acc: dict[tuple, list] = defaultdict(lambda: [0.0, 0, "", 0.0])
    for r in ok:
        for cat, op, kernel, share in r["offenders"]:
            a = acc[(cat, op, kernel)]
            a[0] += share
            a[1] += 1
            if share > a[3]:
                a[2], a[3] = r["model"], share
    lines.append("")
    lines.append("worst offending ops across the corpus (outside tuned kernels): summed share over models, "
                 "models, worst model")
    for (cat, op, kernel), (total, count, model, share) in sorted(acc.items(), key=lambda kv: -kv[1][0])[:15]:
        lines.append(f"  {cat:<13} {op + ' (' + kernel + ')':<34} {total:7.1%}  {count:3d}  {model} {share:.1%}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from nnhal.benchmark.run import _reexec_without_openblas_vars

    _reexec_without_openblas_vars(argv, [sys.executable, os.path.abspath(__file__)])
    from corpus import registry

    p = argparse.ArgumentParser(prog="benchmarks/corpus.py", description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(registry.NAMES), help="comma-separated (default: the corpus)")
    p.add_argument("--half", choices=("tuned", "untuned", "heldout", "all"), default="all")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (one block per engine each)")
    p.add_argument("--budget", type=float, default=0.3, help="seconds per block (at least 2 runs)")
    p.add_argument("--most", type=int, default=40, help="most runs per block")
    p.add_argument("--pause", type=float, default=0.1, help="seconds of pause before each block")
    p.add_argument("--profile-runs", type=int, default=3)
    p.add_argument("--out", default=None, help="also write the table to this file (and the rows as JSON beside)")
    args = p.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    if args.half != "all":
        models = [m for m in models if registry.half_of(m) == args.half]
    import numpy as np  # noqa: F401  (OpenBLAS loads under the cleaned environment)
    import onnxruntime

    from nnhal.benchmark.run import environment_lines

    header = [(f"benchmarks/corpus.py: batch 1, {args.threads} thread(s) each, {args.rounds} alternating rounds of "
               f"~{args.budget:g} s blocks, {args.pause:g} s pause before each; onnxruntime {onnxruntime.__version__}")]
    header += environment_lines()
    for line in header:
        print(line, flush=True)
    rows = []
    for name in models:
        try:
            row = measure(name, args)
        except Exception as exc:  # noqa: BLE001 - a model that cannot run is reported, with the reason
            row = {"model": name, "skip": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
            print(f"{name}: skipped ({row['skip']})", flush=True)
        else:
            print(f"{name} ({row['half']}): nnhal {row['nnhal_ms']:.2f} ms, ort {row['ort_ms']:.2f} ms, "
                  f"ratio {row['ratio']:.2f}, fp16/fp32 {row['fp16_ratio']:.2f}, err {row['err32']:.1e}", flush=True)
        rows.append(row)
    text = render(rows, header)
    print()
    print(text, end="")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
        with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
