"""``nnhal bench``: nnhal vs onnxruntime (and optionally the onnx reference) in one process.

Latency: warm-up runs, then the median (and min/max) of --repeat timed runs of
each runtime on the same inputs, with the same thread count, one runtime after
the other (interleaving them lets one's spinning worker threads steal the cores). Peak memory:
each runtime's peak RSS growth while creating its session and running once,
measured in a fresh subprocess per model and runtime. GFLOP/s counts the
Conv/Gemm/MatMul FLOPs of nnhal's prepared graph. Never used by tests.

OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are read when numpy loads OpenBLAS, so
main() re-executes itself without them when they are set.
"""
from __future__ import annotations

import argparse
import html
import json
import math
import os
import statistics
import subprocess
import sys
import time

UNSET = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
ZOO = ["squeezenet", "resnet50", "inception_v1", "shufflenet", "densenet121", "vgg19", "inception_v2"]
MODELS = ZOO + ["bert"]
_MARK = "NNHAL_BENCH_REEXEC"


def _reexec_without_openblas_vars(argv: list[str], command: list[str] | None = None) -> None:
    """Re-execute ``command`` (default: this module) with ``argv`` without UNSET; _MARK says what was removed."""
    present = {k: os.environ[k] for k in UNSET if k in os.environ}
    if not present:
        return
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    env[_MARK] = ",".join(f"{k}={v}" for k, v in present.items())
    sys.stdout.flush()
    sys.stderr.flush()
    command = command or [sys.executable, "-m", "nnhal.benchmark.run"]
    os.execve(command[0], [*command, *argv], env)


# ------------------------------------------------------------------ models
def load_model(name: str, batch: int):
    """(ModelProto, feeds) for a benchmark model at a batch size."""
    import nnhal.zoo as zoo

    if name == "bert":
        from nnhal.models.bert import bert_inputs, build_bert

        return build_bert(layers=6, hidden=384, heads=12, seq=None), bert_inputs(batch, 128)
    model = zoo.resolve(f"zoo:{name}?weights=random")
    if batch != 1:
        model = _with_batch(model, batch)
    return model, zoo.input_for(model)   # the batch dim is in the model now


def _with_batch(model, batch: int):
    """The model with its (non-initializer) inputs' batch dim rewritten, outputs' batch dim made symbolic
    and constant Reshape targets with a leading 1 made to copy the batch dim."""
    import onnx

    model = onnx.ModelProto.FromString(model.SerializeToString())
    inits = {i.name for i in model.graph.initializer}
    for vi in list(model.graph.input) + list(model.graph.output):
        if vi.name in inits:
            continue
        dims = vi.type.tensor_type.shape.dim
        if dims:
            dims[0].Clear()
            if vi in model.graph.input:
                dims[0].dim_value = batch
            else:
                dims[0].dim_param = "batch"
    del model.graph.value_info[:]
    # Reshape targets hard-coding batch 1 (flatten before the classifier, channel shuffle) copy the
    # batch dim instead: a leading 1 becomes 0 ("copy this dim from the input")
    from onnx import numpy_helper

    by_name = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Reshape" and len(node.input) > 1 and node.input[1] in by_name:
            init = by_name[node.input[1]]
            shape = numpy_helper.to_array(init).copy()
            if shape.ndim == 1 and shape.size and shape[0] == 1:
                shape[0] = 0
                init.CopyFrom(numpy_helper.from_array(shape, init.name))
    return model


def count_flops(graph) -> float:
    """2*MACs of Conv, ConvTranspose-free Gemm and MatMul from the prepared graph's shapes."""
    total = 0.0
    for node in graph.nodes:
        try:
            if node.op_type == "Conv":
                w = graph.tensors[node.inputs[1]].shape
                y = graph.tensors[node.outputs[0]].shape
                total += 2.0 * math.prod(y) * math.prod(w[1:])
            elif node.op_type == "Gemm":
                a = graph.tensors[node.inputs[0]].shape
                y = graph.tensors[node.outputs[0]].shape
                k = a[0] if node.attrs.get("transA") else a[1]
                total += 2.0 * math.prod(y) * k
            elif node.op_type == "MatMul":
                a = graph.tensors[node.inputs[0]].shape
                y = graph.tensors[node.outputs[0]].shape
                total += 2.0 * math.prod(y) * a[-1]
        except (TypeError, KeyError, IndexError):
            continue
    return total


# ------------------------------------------------------------------ runtimes
def _time(fn, warmup: int, repeat: int) -> dict:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return {"median": statistics.median(times), "min": min(times), "max": max(times)}


def make_nnhal(model, feeds, threads: int):
    """(run function, prerun ms, session ms, flops)."""
    import nnhal
    from nnhal import api
    from nnhal.device.manager import FALLBACK_DEVICE

    t0 = time.perf_counter()
    s = nnhal.Session(model, devices=[FALLBACK_DEVICE], num_thread=threads)
    t1 = time.perf_counter()
    for k, v in feeds.items():
        api.set_graph_input(s.graph, k, v)
    api.prerun_graph(s.graph, s.options)
    t2 = time.perf_counter()
    flops = count_flops(s.graph.prepared_graph)
    return (lambda: s.run(feeds)), (t2 - t1) * 1e3, (t2 - t0) * 1e3, flops, s


def make_ort(model, feeds, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    data = model.SerializeToString()
    t0 = time.perf_counter()
    s = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    t1 = time.perf_counter()
    return (lambda: s.run(None, feeds)), (t1 - t0) * 1e3, s


def make_reference(model, feeds):
    from onnx.reference import ReferenceEvaluator

    s = ReferenceEvaluator(model)
    return lambda: s.run(None, feeds)


# ------------------------------------------------------------------ memory
def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def memory_child(runtime: str, name: str, batch: int, threads: int, loader=None) -> None:
    """Runs in a subprocess: print the peak RSS growth (bytes) of creating the session and running twice.
    ``loader(name, batch) -> (model, feeds)``: load_model by default (benchmarks/modern.py passes its own)."""
    import numpy  # noqa: F401  (libraries loaded before the baseline)
    import onnx  # noqa: F401

    if runtime == "nnhal":
        import nnhal  # noqa: F401
        import nnhal.hostkernels.select  # noqa: F401
    else:
        import onnxruntime  # noqa: F401
    model, feeds = (loader or load_model)(name, batch)
    import gc

    gc.collect()
    base = _status("VmRSS")
    if not _reset_peak():
        base = _status("VmHWM")
    if runtime == "nnhal":
        run, *_ = make_nnhal(model, feeds, threads)
    else:
        run, *_ = make_ort(model, feeds, threads)
    run()
    run()
    print(json.dumps({"peak": max(0, _status("VmHWM") - base)}))


def measure_memory(runtime: str, name: str, batch: int, threads: int) -> int | None:
    cmd = [sys.executable, "-m", "nnhal.benchmark.run", "--memory-child", runtime, name, str(batch), str(threads)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        return int(json.loads(out.stdout.strip().splitlines()[-1])["peak"])
    except Exception:  # noqa: BLE001 - a failed measurement is reported as missing
        return None


# ------------------------------------------------------------------ overhead
def overhead(threads: int, nodes: int, repeat: int) -> dict:
    """µs per node of a chain of tiny Add nodes, nnhal and onnxruntime."""
    import numpy as np
    from onnx import TensorProto, helper

    # NOTE: each Add takes the graph input x again (t_i = t_(i-1) + x): a chain of constant Adds is one Add
    # after the constant-Add folding pass (optimizer/constant_adds.py), which measured 0.02 us a "node"
    chain = [helper.make_node("Add", ["x" if i == 0 else f"t{i - 1}", "x"], [f"t{i}" if i < nodes - 1 else "y"])
             for i in range(nodes)]
    graph = helper.make_graph(chain, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"x": np.full((1, 8), 0.5, np.float32)}
    import nnhal
    from nnhal.device.manager import FALLBACK_DEVICE

    with nnhal.Session(model, devices=[FALLBACK_DEVICE], num_thread=threads, name="overhead") as s:
        # nothing folds: every node reads the real input x
        t_n = _time(lambda: s.run(feeds), 3, repeat)
        check = s.run(feeds)[0]
    run_o, _, _ = make_ort(model, feeds, threads)
    t_o = _time(run_o, 3, repeat)
    assert np.allclose(check, 0.5 * (nodes + 1))
    return {"nodes": nodes, "nnhal_us": t_n["median"] * 1e3 / nodes, "ort_us": t_o["median"] * 1e3 / nodes}


# ------------------------------------------------------------------ report
def _fmt_mb(b):
    return "-" if b is None else f"{b / 2**20:.0f}"


def render_table(rows: list[dict], header_lines: list[str], over: dict | None) -> str:
    cols = ["model", "batch", "nnhal ms", "(min-max)", "ort ms", "(min-max)", "ratio", "GFLOP/s", "nnhal MB",
            "ort MB", "mem ratio", "nnhal prerun ms", "ort create ms"]
    has_ref = any("ref_ms" in r for r in rows)
    if has_ref:
        cols.append("reference ms")
    lines = list(header_lines) + [""]
    table = [cols]
    for r in rows:
        if r.get("skip"):
            table.append([r["model"], str(r["batch"]), f"skipped: {r['skip']}"] + [""] * (len(cols) - 3))
            continue
        mem_ratio = (f"{r['nnhal_mem'] / r['ort_mem']:.2f}" if r.get("nnhal_mem") and r.get("ort_mem") else "-")
        line = [r["model"], str(r["batch"]), f"{r['nnhal']['median']:.2f}",
                f"{r['nnhal']['min']:.1f}-{r['nnhal']['max']:.1f}", f"{r['ort']['median']:.2f}",
                f"{r['ort']['min']:.1f}-{r['ort']['max']:.1f}", f"{r['ratio']:.2f}",
                f"{r['gflops']:.1f}", _fmt_mb(r.get("nnhal_mem")), _fmt_mb(r.get("ort_mem")), mem_ratio,
                f"{r['prerun_ms']:.0f}", f"{r['ort_create_ms']:.0f}"]
        if has_ref:
            line.append(f"{r['ref_ms']:.1f}" if "ref_ms" in r else "-")
        table.append(line)
    widths = [max(len(row[i]) for row in table if not row[2].startswith("skipped")) for i in range(len(cols))]
    for k, row in enumerate(table):
        if len(row) > 3 and row[2].startswith("skipped"):
            lines.append(f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]}")
            continue
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    for label, sel in _geomeans(rows):
        lines.append(f"geometric mean nnhal/ort, {label}: {sel:.2f}")
    if over:
        lines.append(f"framework overhead ({over['nodes']}-node Add chain of [1,8]): "
                     f"nnhal {over['nnhal_us']:.2f} us/node, ort {over['ort_us']:.2f} us/node")
    return "\n".join(lines) + "\n"


def _geomeans(rows: list[dict]) -> list[tuple[str, float]]:
    out = []
    done = [r for r in rows if not r.get("skip")]
    for batch in sorted({r["batch"] for r in done}):
        zoo = [r["ratio"] for r in done if r["batch"] == batch and r["model"] != "bert"]
        if zoo:
            out.append((f"zoo models at batch {batch}", math.exp(sum(map(math.log, zoo)) / len(zoo))))
    if done:
        out.append(("all rows", math.exp(sum(math.log(r["ratio"]) for r in done) / len(done))))
    return out


def render_html(rows: list[dict], text: str) -> str:
    """The rows as a sortable table with a chart of the nnhal/onnxruntime latency ratios."""
    from nnhal.ui.htmlpage import BAD, GOOD, WARN, Bar, Cell, Chart, Column, Table, page

    def color(ratio: float) -> str:
        return GOOD if ratio <= 1.5 else WARN if ratio <= 2.5 else BAD

    css = {GOOD: "good", WARN: "warn", BAD: "bad"}

    done = [r for r in rows if not r.get("skip")]
    chart = Chart("latency nnhal / onnxruntime (lower is better)",
                  [Bar(f"{r['model']} b{r['batch']}", r["ratio"], color(r["ratio"]), f"{r['ratio']:.2f}")
                   for r in done],
                  [(1.0, "1"), (1.5, "1.5"), (2.5, "2.5")])
    table_rows = []
    for r in rows:
        if r.get("skip"):
            table_rows.append([r["model"], r["batch"], None, None, None, None, None, None, None,
                               Cell("skipped: " + r["skip"], None, "neutral")])
            continue
        table_rows.append([r["model"], r["batch"], round(r["nnhal"]["median"], 3), round(r["ort"]["median"], 3),
                           Cell(f"{r['ratio']:.2f}", r["ratio"], css[color(r["ratio"])]),
                           round(r["gflops"], 2),
                           None if r.get("nnhal_mem") is None else round(r["nnhal_mem"] / 2**20, 1),
                           None if r.get("ort_mem") is None else round(r["ort_mem"] / 2**20, 1),
                           round(r["prerun_ms"], 1), f"max rel err {r['max_rel_err']:.1e}"])
    table = Table("bench", "Models", [
        Column("model"), Column("batch", True),
        Column("nnhal ms", True, "nnhal median latency per run"), Column("ort ms", True, "onnxruntime median latency"),
        Column("ratio", True, "nnhal ms / ort ms: below 1 nnhal is faster"),
        Column("GFLOP/s", True, "Conv/Gemm/MatMul FLOPs per second of nnhal"),
        Column("nnhal MB", True, "peak RSS growth creating the session and running twice"),
        Column("ort MB", True, "the same for onnxruntime"),
        Column("nnhal prerun ms", True, "time to prepare the graph"),
        Column("note", help="skip reason, or the largest relative difference of the outputs")], table_rows)
    means = "; ".join(f"geometric mean nnhal/ort, {label}: {v:.2f}" for label, v in _geomeans(rows))
    return page("nnhal vs onnxruntime", means or "no model ran", chart, [table],
                [(GOOD, "ratio <= 1.5"), (WARN, "ratio <= 2.5"), (BAD, "ratio > 2.5")],
                "<h2>Full output</h2><pre>" + html.escape(text) + "</pre>")


# ------------------------------------------------------------------ main
def environment_lines() -> list[str]:
    """What the benchmark's environment was: the removed OpenBLAS variables, the BLAS kernel in use and
    where the cpu device's threads come from."""
    from threadpoolctl import threadpool_info

    removed = os.environ.get(_MARK)
    lines = ["OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for this run"
             + (f" (re-executed without {removed})" if removed else " (they were not set)")]
    for info in threadpool_info():
        if info.get("user_api") == "blas":
            lines.append(f"BLAS: {info.get('internal_api')} {info.get('version')} kernel={info.get('architecture')} "
                         f"threading={info.get('threading_layer')} ({os.path.basename(info.get('filepath', ''))})")
    from nnhal import api

    cpu = {d.name: d for d in api.devices()}.get("cpu")
    if cpu is not None:     # its threads and BLAS, as `nnhal devices` says them
        lines.append("nnhal cpu: " + cpu.describe().summary)
    return lines


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nnhal bench", description=__doc__.splitlines()[0])
    from nnhal.ui.command import add_quiet, natural_int, output_file, positive_int

    def batches(text: str) -> list[int]:
        return [positive_int(b) for b in text.split(",") if b.strip()]

    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {','.join(MODELS)}")
    p.add_argument("--batch", type=batches, default="1,8", help="comma-separated batch sizes (default: 1,8)")
    p.add_argument("--threads", type=natural_int, default=0, help="threads for both runtimes (0 = one per core)")
    p.add_argument("--repeat", type=positive_int, default=10, help="timed runs per runtime (default: 10)")
    p.add_argument("--warmup", type=natural_int, default=2, help="untimed runs first (default: 2)")
    p.add_argument("--reference", action="store_true", help="also time onnx.reference.ReferenceEvaluator")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    p.add_argument("--overhead", action="store_true", help="run the framework-overhead micro-benchmark")
    p.add_argument("--overhead-nodes", type=positive_int, default=1000,
                   help="Add nodes in the overhead micro-benchmark's chain (default: 1000)")
    p.add_argument("--html", type=output_file(".html", ".htm"), default=None,
                   help="write an HTML report (sortable table, a chart of the ratios)")
    p.add_argument("--out", default=None, help="also write the printed table to this file")
    add_quiet(p)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:   # `nnhal bench -- --models ...` (argparse REMAINDER needs the "--" before options)
        argv = argv[1:]
    if argv[:1] == ["--memory-child"]:
        memory_child(argv[1], argv[2], int(argv[3]), int(argv[4]))
        return 0
    _reexec_without_openblas_vars(argv)
    args = build_parser().parse_args(argv)
    threads = args.threads or os.cpu_count() or 1
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        print(f"nnhal bench: unknown model(s) {unknown}; choose from {MODELS}", file=sys.stderr)
        return 2
    batches = args.batch

    import numpy as np  # noqa: F401  (loads OpenBLAS under the cleaned environment)
    try:
        import onnxruntime
    except ImportError:
        print("nnhal bench: the peer runtime onnxruntime is not installed; install it with "
              "python -m pip install 'nnhal[bench]' (or \".[bench]\" from a checkout)", file=sys.stderr)
        return 2
    header = [f"nnhal bench: {threads} thread(s), warm-up {args.warmup}, median of {args.repeat} runs; "
              f"onnxruntime {onnxruntime.__version__} (CPUExecutionProvider)"] + environment_lines()
    for line in header:
        print(line, flush=True)

    from nnhal.ui.progress import Progress

    rows = []
    bar = Progress("bench", len(models) * len(batches), quiet=args.quiet)
    for name in models:
        for batch in batches:
            bar.step(0, f"{name} batch {batch}")
            row = {"model": name, "batch": batch}
            try:
                model, feeds = load_model(name, batch)
                # one runtime after the other, nnhal timed before onnxruntime's session exists: interleaving
                # lets the spinning worker threads of one (onnxruntime's pool, OpenBLAS) steal the cores from
                # the other, and a just-run onnxruntime pool measurably slowed nnhal's first runs
                run_n, prerun_ms, session_ms, flops, sess = make_nnhal(model, feeds, threads)
                row["nnhal"] = _time(run_n, args.warmup, args.repeat)
                got = run_n()
                run_o, create_ms, _ = make_ort(model, feeds, threads)
                row["ort"] = _time(run_o, args.warmup, args.repeat)
                want = run_o()
                err = max(float(np.max(np.abs(g - w)) / (np.max(np.abs(w)) + 1e-12)) for g, w in zip(got, want))
            except Exception as exc:  # noqa: BLE001 - a model that cannot run at this batch is skipped, with the reason
                row["skip"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                print(f"{name} batch {batch}: skipped ({row['skip']})", flush=True)
                rows.append(row)
                bar.step(detail=f"{name} batch {batch} skipped")
                continue
            row.update(ratio=row["nnhal"]["median"] / row["ort"]["median"], gflops=flops / row["nnhal"]["median"] / 1e6,
                       prerun_ms=prerun_ms, session_ms=session_ms, ort_create_ms=create_ms, max_rel_err=err)
            sess.close()
            del run_n, run_o, sess
            if args.reference:
                try:
                    row["ref_ms"] = _time(make_reference(model, feeds), 0, 1)["median"]
                except Exception as exc:  # noqa: BLE001
                    print(f"{name}: reference evaluator failed: {exc}", flush=True)
            if not args.no_memory:
                row["nnhal_mem"] = measure_memory("nnhal", name, batch, threads)
                row["ort_mem"] = measure_memory("ort", name, batch, threads)
            print(f"{name} batch {batch}: nnhal {row['nnhal']['median']:.2f} ms, ort {row['ort']['median']:.2f} ms, "
                  f"ratio {row['ratio']:.2f}, max rel err {err:.1e}", flush=True)
            rows.append(row)
            bar.step(detail=f"{name} batch {batch} ratio {row['ratio']:.2f}")
    bar.close()
    over = overhead(threads, args.overhead_nodes, max(args.repeat, 20)) if args.overhead else None
    text = render_table(rows, header, over)
    print()
    print(text, end="")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)
    if args.html:
        os.makedirs(os.path.dirname(os.path.abspath(args.html)), exist_ok=True)
        with open(args.html, "w") as f:
            f.write(render_html(rows, text))
        print(f"wrote {args.html}")
    return 0


if __name__ == "__main__":
    from nnhal.ui.command import guarded

    sys.exit(guarded(main))
