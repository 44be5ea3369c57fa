"""webgpu against the cpu device and onnxruntime, on the zoo CNNs and a BERT encoder.

    python benchmarks/webgpu.py [--models squeezenet,resnet50] [--batch 1] [--repeat 3] [--bert-seq 128]

Per model: median latency of each runtime (same inputs, one after the other; webgpu also at fp16
where the adapter has shader-f16), the webgpu device's
dispatch count per run and the latency per dispatch (run time / dispatches, i.e. submit, GPU and
readback included), the GPU's own time for them ("gpu ms": timestamp queries from one profiled run,
where the adapter has timestamp-query), its prepare time (WGSL generation, pipeline compilation, weight upload), and the
relative error of webgpu's first output against onnxruntime. The adapter is printed first: on a
machine without a GPU it is Mesa's lavapipe, which runs the shaders on the CPU.

OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset by re-executing (as nnhal bench does); the output says so.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from nnhal.benchmark.run import UNSET, _time, count_flops, load_model, make_ort

DEFAULT = ["squeezenet", "shufflenet", "resnet50", "inception_v1", "densenet121", "bert"]


def _reexec() -> None:
    if any(k in os.environ for k in UNSET):
        env = {k: v for k, v in os.environ.items() if k not in UNSET}
        env["NNHAL_WEBGPU_BENCH_UNSET"] = ",".join(k for k in UNSET if k in os.environ)
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


def _model(name: str, batch: int, seq: int):
    if name == "bert":
        from nnhal.models.bert import bert_inputs, build_bert

        return build_bert(layers=6, hidden=384, heads=12, seq=None), bert_inputs(batch, seq)
    return load_model(name, batch)


def _session(model, feeds, devices: list[str], threads: int, precision: str = "fp32"):
    import nnhal
    from nnhal import api

    s = nnhal.Session(model, devices=devices, num_thread=threads, strict=True, precision=precision)
    t0 = time.perf_counter()
    for k, v in feeds.items():
        api.set_graph_input(s.graph, k, v)
    api.prerun_graph(s.graph, s.options)
    return s, (time.perf_counter() - t0) * 1e3


def bench(name: str, batch: int, repeat: int, threads: int, seq: int, fp16: bool) -> dict:
    model, feeds = _model(name, batch, seq)
    gpu, gpu_prep = _session(model, feeds, ["webgpu", "cpu"], threads)
    first = gpu.run(feeds)
    gpu_ms = _time(lambda: gpu.run(feeds), 1, repeat)
    # GPU time of the dispatches themselves (timestamp queries; one pass per dispatch while profiling)
    profile = gpu.profile(feeds, runs=1)
    gpu_busy = sum(n.ms for n in profile.nodes if n.device == "webgpu")
    subgraphs = gpu.graph.execution.subgraphs
    dispatches = sum(sg.stats.get("webgpu_dispatches", 0) for sg in subgraphs if sg.device == "webgpu")
    nodes_on_gpu = sum(len(sg.nodes) for sg in subgraphs if sg.device == "webgpu")
    nodes = sum(len(sg.nodes) for sg in subgraphs)
    flops = count_flops(gpu.graph.prepared_graph)
    gpu.close()
    half_ms = None
    if fp16:
        half, _ = _session(model, feeds, ["webgpu", "cpu"], threads, "fp16")
        half_ms = _time(lambda: half.run(feeds), 1, repeat)["median"]
        half.close()
    cpu, _ = _session(model, feeds, ["cpu"], threads)
    cpu_ms = _time(lambda: cpu.run(feeds), 1, repeat)
    cpu.close()
    run_ort, _, ort_session = make_ort(model, feeds, threads)
    want = run_ort()
    ort_ms = _time(run_ort, 1, repeat)
    rel = float(np.max(np.abs(first[0] - want[0])) / max(np.max(np.abs(want[0])), 1e-30))
    return {"model": name, "batch": batch, "webgpu": gpu_ms["median"], "fp16": half_ms, "cpu": cpu_ms["median"],
            "ort": ort_ms["median"], "dispatches": dispatches, "busy": gpu_busy,
            "per_dispatch_us": 1e3 * gpu_ms["median"] / dispatches,
            "prepare": gpu_prep, "nodes": f"{nodes_on_gpu}/{nodes}", "gflops": flops / 1e9, "rel": rel}


def main() -> int:
    _reexec()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(DEFAULT))
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--bert-seq", type=int, default=128)
    p.add_argument("--no-fp16", action="store_true", help="skip the webgpu fp16 column")
    args = p.parse_args()
    import nnhal
    from nnhal.device.manager import find_device

    nnhal.init()
    desc = find_device("webgpu").describe()
    print(f"adapter: {desc.summary}")
    if os.environ.get("NNHAL_WEBGPU_BENCH_UNSET"):
        print(f"(unset for this benchmark: {os.environ['NNHAL_WEBGPU_BENCH_UNSET']})")
    if not desc.ops:
        print("webgpu is unavailable; nothing to measure")
        return 1
    print(f"batch {args.batch}, {args.threads} threads for cpu/onnxruntime, median of {args.repeat} runs, ms")
    fp16 = "fp16" in desc.precisions and not args.no_fp16
    head = (f"{'model':12s} {'webgpu':>9s} {'fp16':>9s} {'cpu':>8s} {'ort':>8s} {'gpu/ort':>8s} {'disp':>5s} "
            f"{'us/disp':>8s} {'gpu ms':>8s} {'prep ms':>8s} {'on gpu':>8s} {'GFLOP':>6s} {'rel err':>8s}")
    print(head)
    for name in [m for m in args.models.split(",") if m]:
        r = bench(name, args.batch, args.repeat, args.threads, args.bert_seq, fp16)
        half = f"{r['fp16']:9.1f}" if r["fp16"] is not None else f"{'-':>9s}"
        print(f"{r['model']:12s} {r['webgpu']:9.1f} {half} {r['cpu']:8.1f} {r['ort']:8.1f} "
              f"{r['webgpu'] / r['ort']:8.1f} "
              f"{r['dispatches']:5d} {r['per_dispatch_us']:8.0f} {r['busy']:8.1f} {r['prepare']:8.0f} {r['nodes']:>8s} "
              f"{r['gflops']:6.2f} {r['rel']:8.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
