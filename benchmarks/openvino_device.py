"""nnhal on [openvino, cpu] against onnxruntime and against nnhal's cpu device, in one run
(python benchmarks/openvino_device.py --help).

Per model (the zoo, the BERT encoder of ``nnhal bench``, the modern models of benchmarks/modern.py when
torch can export them): one session of each runtime, all alive in one process, timed in alternating
blocks (openvino, onnxruntime, cpu, then again, ``--blocks`` times) so that load from other processes
falls on all three alike; the time of a runtime is the median over all its runs. onnxruntime's threads
do not spin while idle (session.intra_op.allow_spinning=0), else they would steal the cores from the
others between its blocks. Outputs are checked against onnxruntime first (relative to each output's
largest magnitude). ``--int8`` adds fp32 against uint8 (nnhal.calibrate, QDQ) on openvino for BERT and
ResNet-50. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are removed from this command's environment only (the
script re-executes itself without them) and the output says so. Never used by tests.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# NOTE: not named openvino.py: every benchmark script puts this folder first on sys.path, where a file of
# that name shadowed the openvino package (corpus.py's nnhal then found no openvino.Core)
sys.path.insert(0, HERE)

ZOO = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
       "vgg19", "zfnet512"]
DROPPED_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def load(name: str, batch: int):
    from models import registry

    if name in registry.NAMES:
        return registry.load(name, batch)
    from nnhal.benchmark.run import load_model

    return load_model(name, batch)


def ort_session(model, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)


def nnhal_session(model, devices: list[str], threads: int, **kwargs):
    import nnhal

    session = nnhal.Session(model, devices=devices, num_thread=threads, **kwargs)
    return session, session.run


def relative(got: list, want: list) -> float:
    import numpy as np

    return max(float(np.abs(np.asarray(g, np.float64) - w).max() / max(float(np.abs(w).max()), 1e-30))
               for g, w in zip(got, want))


def alternate(runners: dict, feeds: dict, blocks: int, per_block: int) -> dict[str, float]:
    """Median ms per runtime over ``blocks`` alternating blocks of ``per_block`` runs each (one warm-up run)."""
    times: dict[str, list[float]] = {k: [] for k in runners}
    for run in runners.values():
        run(feeds)
    for _ in range(blocks):
        for name, run in runners.items():
            for _ in range(per_block):
                t0 = time.perf_counter()
                run(feeds)
                times[name].append((time.perf_counter() - t0) * 1e3)
    return {k: sorted(v)[len(v) // 2] for k, v in times.items()}


def per_block(model, feeds, threads: int) -> int:
    """Runs per block: about 0.3 s of onnxruntime per block, 2 to 10 runs."""
    run = ort_session(model, threads)
    run(feeds)
    t0 = time.perf_counter()
    run(feeds)
    return max(2, min(10, int(0.3 / max(time.perf_counter() - t0, 1e-4))))


def measure(name: str, batch: int, threads: int, blocks: int) -> dict:
    model, feeds = load(name, batch)
    row = {"model": name, "batch": batch}
    want = ort_session(model, threads)(feeds)
    ov, ov_run = nnhal_session(model, ["openvino", "cpu"], threads)
    cpu, cpu_run = nnhal_session(model, ["cpu"], threads)
    try:
        row["rel_err"] = relative(ov_run(feeds), want)
        devices = [d.device for d in ov.placement.values()]
        row["on_openvino"] = f"{devices.count('openvino')}/{len(devices)}"
        row["fallbacks"] = len(ov.fallbacks)
        ms = alternate({"openvino": ov_run, "ort": ort_session(model, threads), "cpu": cpu_run}, feeds, blocks,
                       per_block(model, feeds, threads))
    finally:
        ov.close()
        cpu.close()
    row.update({f"{k}_ms": v for k, v in ms.items()})
    row["ov/ort"] = ms["openvino"] / ms["ort"]
    row["ov/cpu"] = ms["openvino"] / ms["cpu"]
    return row


def measure_int8(name: str, batch: int, threads: int, blocks: int) -> dict:
    import nnhal

    model, feeds = load(name, batch)
    last = model.graph.node[-1]
    if last.op_type == "Softmax" and last.output[0] == model.graph.output[0].name:
        # compared on the logits: a softmax of random-weight logits is all but one-hot
        del model.graph.node[-1]
        model.graph.output[0].name = last.input[0]
    calibration = [feeds]
    table = nnhal.calibrate(model, calibration, progress=False)
    fp32, fp32_run = nnhal_session(model, ["openvino", "cpu"], threads)
    q, q_run = nnhal_session(model, ["openvino", "cpu"], threads, precision="uint8", calibration=table)
    try:
        ref = fp32_run(feeds)
        err = relative(q_run(feeds), ref)
        qdq = sum(sg.stats.get("openvino_qdq", 0) for sg in q.subgraphs)
        ms = alternate({"fp32": fp32_run, "uint8": q_run}, feeds, blocks, 3)
    finally:
        fp32.close()
        q.close()
    return {"model": name, "batch": batch, "fp32_ms": ms["fp32"], "uint8_ms": ms["uint8"],
            "uint8/fp32": ms["uint8"] / ms["fp32"], "rel_err_vs_fp32": err, "quantized_tensors": qdq}


def validate_table(report: str) -> str:
    """Per op, from a ``nnhal validate --device openvino --report X.json`` report: cases whose nodes of
    that op all ran on openvino and passed, cases that passed with a node of it on the CPU (fallback,
    not openvino's), wrong, unsupported and error. Node names map to op types through the cases."""
    import json
    from collections import defaultdict

    from nnhal.conformance.runner import all_cases

    models = {c.name: c.model for c in all_cases()}
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    cases: dict[str, int] = defaultdict(int)
    with open(report, encoding="utf-8") as f:
        report_cases = json.load(f)["cases"]
    for case in report_cases:
        devices = set(case["placement"].values())
        cases[case["status"] if case["status"] != "pass" else
              "on openvino" if devices == {"openvino"} else "on fallback"] += 1
        graph = models[case["name"]].graph
        op_of = {(n.name or f"{n.op_type}_{i}"): n.op_type for i, n in enumerate(graph.node)}
        for op in case["ops"]:
            where = {d for name, d in case["placement"].items() if op_of.get(name) == op}
            status = case["status"]
            if status == "pass":
                status = "on openvino" if where <= {"openvino"} and where else "on fallback"
            counts[op][status] += 1
    cols = ("on openvino", "on fallback", "wrong", "unsupported", "error")
    lines = ["cases: " + ", ".join(f"{cases[c]} {c}" for c in cols) + "\n",
             "| op | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for op in sorted(counts):
        lines.append(f"| {op} | " + " | ".join(str(counts[op][c]) for c in cols) + " |")
    total = {c: sum(counts[op][c] for op in counts) for c in cols}
    lines.append("| (all ops) | " + " | ".join(str(total[c]) for c in cols) + " |")
    return "\n".join(lines)


def modern_names() -> list[str]:
    try:
        import torch  # noqa: F401
        from models import registry
    except ImportError:
        return []
    return list(registry.NAMES)


def main(argv: list[str] | None = None) -> int:
    if any(v in os.environ for v in DROPPED_ENV):
        env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *(argv or sys.argv[1:])], env)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="", help="comma-separated (default: the zoo, bert and the modern models)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=3, help="alternating blocks per model")
    parser.add_argument("--int8", action="store_true", help="also uint8 vs fp32 on openvino for bert and resnet50")
    parser.add_argument("--no-fp32", action="store_true", help="skip the fp32 comparison")
    parser.add_argument("--validate-report", default=None,
                        help="only print the per-op table of a `nnhal validate --device openvino --report X.json`")
    args = parser.parse_args(argv)
    if args.validate_report:
        print(validate_table(args.validate_report))
        return 0
    names = [n for n in args.models.split(",") if n] or [*ZOO, "bert", *modern_names()]
    print(f"# benchmarks/openvino_device.py: {args.threads} threads, batch {args.batch}, "
          f"{args.blocks} alternating blocks; "
          f"{', '.join(DROPPED_ENV)} removed from the environment; measured under whatever load the machine has")
    rows = []
    if not args.no_fp32:
        print(f"{'model':18s} {'openvino ms':>11s} {'ort ms':>9s} {'cpu ms':>9s} {'ov/ort':>7s} {'ov/cpu':>7s} "
              f"{'rel err':>8s} on openvino")
        for name in names:
            try:
                row = measure(name, args.batch, args.threads, args.blocks)
            except Exception as exc:  # noqa: BLE001 - a benchmark row that fails is reported, the rest go on
                print(f"{name:18s} failed: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            rows.append(row)
            print(f"{name:18s} {row['openvino_ms']:11.2f} {row['ort_ms']:9.2f} {row['cpu_ms']:9.2f} "
                  f"{row['ov/ort']:7.2f} {row['ov/cpu']:7.2f} {row['rel_err']:8.1e} {row['on_openvino']}"
                  + (f" ({row['fallbacks']} fallbacks)" if row["fallbacks"] else ""), flush=True)
        if rows:
            for key in ("ov/ort", "ov/cpu"):
                geo = math.exp(sum(math.log(r[key]) for r in rows) / len(rows))
                print(f"geomean {key}: {geo:.2f} over {len(rows)} models")
    if args.int8:
        print(f"{'model':18s} {'fp32 ms':>9s} {'uint8 ms':>9s} {'u8/fp32':>8s} {'rel err':>8s} quantized tensors")
        for name in ("bert", "resnet50"):
            r = measure_int8(name, args.batch, args.threads, args.blocks)
            print(f"{name:18s} {r['fp32_ms']:9.2f} {r['uint8_ms']:9.2f} {r['uint8/fp32']:8.2f} "
                  f"{r['rel_err_vs_fp32']:8.1e} {r['quantized_tensors']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
