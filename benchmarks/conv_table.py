"""Per-convolution table of a corpus model: nnhal's step time against onnxruntime's node time (issue 27).

For each Conv node of a corpus model (never a held-out one): its shape (C_in -> C_out, kernel, stride, group, input
and output size, multiply-adds), the nnhal kernel and, for ConvGemmNHWC, the path its prepare took ("direct", "1x1",
"im2col", "grouped", ...; the profile names only the kernel), nnhal's per-step time from ``Session.profile`` and
onnxruntime's per-node time from its own profiler (``SessionOptions.enable_profiling``; a node onnxruntime fused is
matched through the output it names: a Conv + Relu (+ Add) is one node there, as in nnhal's epilogue), both in
GFLOP/s. Below the table: the time outside the convolutions, by op, on both sides.

Rounds alternate the two engines in one process; each round profiles ``--runs`` nnhal runs (one mean a step) and
times ``--runs`` onnxruntime runs (one mean a node); the table shows the median over rounds, and ``--stat min`` the
minimum (on a loaded machine the median of a 2-thread run mostly measures which other job held the second core).

NOTE: nnhal's profile times a step from the scheduler, so each step's time includes its Python call, the
argument checks and the timer (about 10 us a step on the 2-core Zen 3 VM, measured against a timer around the
kernel's own call); onnxruntime's profiler times its kernel's compute only. Small steps (a 1x1 of 1.6M
multiply-adds: ~45 us) read 20-30% slower in the table than their kernels are.

    python benchmarks/conv_table.py --models resnet_bottleneck,resnet_basic --threads 2 --rounds 8

NOTE: one thread count per invocation; tables at two thread counts run one after the other compare two moments
of the host (on the 2-core VM its speed moved by 40% within minutes): compare thread counts in one process.

OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are removed from the command's environment (it re-executes itself without
them, as benchmarks/corpus.py does).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable

import numpy as np
import onnx
from onnx import shape_inference

from nnhal.device.cpu.kernels._conv_nhwc import ConvGemmNHWC
from nnhal.hostkernels import _conv2d

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def conv_shapes(model) -> dict[str, dict]:
    """Conv node name -> its shape (cin, cout, k, s, g, in, out, macs) from onnx's shape inference, and the path
    ConvGemmNHWC's prepare takes for it (``path``: direct, 1x1, im2col, grouped, depthwise or shift)."""
    m = shape_inference.infer_shapes(model)
    dims = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
            for vi in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output)}
    inits = {i.name: list(i.dims) for i in m.graph.initializer}
    out = {}
    for n in m.graph.node:
        if n.op_type != "Conv" or n.input[1] not in inits or n.input[0] not in dims or n.output[0] not in dims:
            continue
        a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
        w, xi, yo = inits[n.input[1]], dims[n.input[0]], dims[n.output[0]]
        if len(w) != 4 or len(yo) != 4:
            continue
        strides, group = tuple(a.get("strides", [1, 1])), a.get("group", 1)
        geometry = _conv2d.Conv2d(xi[0], xi[1], xi[2], xi[3], w[0], group, (w[2], w[3]), strides,
                                  tuple(a.get("dilations", [1, 1])), tuple(a.get("pads", [0, 0, 0, 0])), yo[2], yo[3],
                                  np.dtype(np.float32))
        out[n.name] = dict(cin=xi[1], cout=w[0], k=f"{w[2]}x{w[3]}", s=strides[0], g=group, hw=f"{xi[2]}x{xi[3]}",
                           ohw=f"{yo[2]}x{yo[3]}", macs=int(np.prod(yo)) * int(np.prod(w[1:])),
                           path=ConvGemmNHWC.path(geometry))
    return out


def conv_of_output(model) -> Callable[[str], str | None]:
    """tensor name -> the Conv node whose (fused) chain produces it: walks back through the activations and Adds
    onnxruntime fuses into a convolution (its profiler names a fused node by the chain's last output)."""
    producer = {o: n for n in model.graph.node for o in n.output}

    def find(tensor: str) -> str | None:
        node = producer.get(tensor)
        for _ in range(4):
            if node is None:
                return None
            if node.op_type == "Conv":
                return node.name
            ins = [producer.get(i) for i in node.input]
            convs = [p for p in ins if p is not None and p.op_type == "Conv"]
            node = (convs or [p for p in ins if p is not None] or [None])[0]
        return None

    return find


def main(argv: list[str] | None = None) -> int:
    import onnxruntime as ort
    from corpus import registry

    import nnhal
    from nnhal.benchmark.run import _MARK, _reexec_without_openblas_vars

    argv = sys.argv[1:] if argv is None else argv
    _reexec_without_openblas_vars(argv, [sys.executable, os.path.abspath(__file__)])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", required=True, help="comma-separated corpus names (tuned or untuned only)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--runs", type=int, default=5, help="runs a round, each engine")
    p.add_argument("--stat", choices=("median", "min"), default="median")
    args = p.parse_args(argv)
    pick = statistics.median if args.stat == "median" else min
    removed = os.environ.get(_MARK) or "they were not set"
    print(f"OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for this run ({removed})")
    for name in args.models.split(","):
        if registry.half_of(name) == "heldout":
            p.error(f"{name} is a held-out model: it is never profiled")
        model, feeds = registry.load(name)
        shapes = conv_shapes(model)
        find = conv_of_output(model)
        sess = nnhal.Session(model, devices=["cpu"], num_thread=args.threads)
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tempfile.gettempdir(), f"conv_table_{os.getpid()}")
        osess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        osess.run(None, feeds)
        nn: dict[str, list[float]] = defaultdict(list)      # step -> ms a round
        kinds: dict[str, tuple[str, str]] = {}
        wall_nn, wall_ort = [], []
        for _ in range(args.rounds):
            prof = sess.profile(feeds, runs=args.runs, warmup=1)
            wall_nn.append(prof.wall_ms)
            for t in prof.nodes:
                nn[t.node].append(t.ms)
                kinds[t.node] = (t.op, t.kernel)
            t0 = time.perf_counter()
            for _ in range(args.runs):
                osess.run(None, feeds)
            wall_ort.append((time.perf_counter() - t0) / args.runs * 1e3)
        trace = osess.end_profiling()
        with open(trace) as f:
            events = json.load(f)
        os.remove(trace)
        per_node: dict[str, list[float]] = defaultdict(list)
        ort_op: dict[str, str] = {}
        for e in events:
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                key = e["name"][:-len("_kernel_time")]
                per_node[key].append(e["dur"] / 1e3)
                ort_op[key] = e["args"].get("op_name", "?")
        ort_ms: dict[str, float] = {}
        for key, ds in per_node.items():
            ds = ds[1:]                         # the warm-up run
            rounds = [float(np.mean(ds[i:i + args.runs])) for i in range(0, len(ds) - args.runs + 1, args.runs)]
            ort_ms[key] = pick(rounds) if rounds else 0.0
        ort_conv: dict[str, float] = {}
        ort_other: dict[str, float] = defaultdict(float)
        for key, ms in ort_ms.items():
            base = key[:-len("_nchwc")] if key.endswith("_nchwc") else key
            conv = find(base) if ort_op[key] in ("Conv", "FusedConv") else None
            if conv is not None:
                ort_conv[conv] = ort_conv.get(conv, 0.0) + ms
            else:
                ort_other[ort_op[key]] += ms
        print(f"== {name} ({registry.half_of(name)}), {args.threads} thread(s), {args.rounds} rounds of {args.runs} "
              f"runs, {args.stat}; wall a run (profiling on): nnhal {pick(wall_nn):.3f} ms, onnxruntime "
              f"{pick(wall_ort):.3f} ms")
        print(f"{'node':40s} {'cin':>4} {'cout':>4} {'k':>3} s {'g':>3} {'in':>9} {'out':>7} {'MMAC':>6} "
              f"{'nnhal ms':>8} {'GF/s':>5} {'ort ms':>7} {'GF/s':>5} {'ratio':>5}  nnhal kernel (path)")
        tn = to = 0.0
        conv_steps = set()
        for node, c in shapes.items():
            step = node if node in nn else None
            ms = pick(nn[step]) if step else 0.0
            if step:
                conv_steps.add(step)
            om = ort_conv.get(node, 0.0)
            tn, to = tn + ms, to + om

            def gf(v, c=c):
                return 2 * c["macs"] / (v * 1e6) if v else 0.0
            kernel = kinds.get(step, ("", "?"))[1]
            # the profile names the kernel; ConvGemmNHWC's path is the branch its prepare took
            label = f"{kernel} ({c['path']})" if kernel == "nhwc-gemm" else kernel
            print(f"{node[-40:]:40s} {c['cin']:4d} {c['cout']:4d} {c['k']:>3} {c['s']} {c['g']:3d} {c['hw']:>9} "
                  f"{c['ohw']:>7} {c['macs'] / 1e6:6.1f} {ms:8.3f} {gf(ms):5.1f} {om:7.3f} {gf(om):5.1f} "
                  f"{ms / om if om else 0:5.2f}  {label}")
        print(f"convolutions: nnhal {tn:.3f} ms, onnxruntime {to:.3f} ms")
        other: dict[str, float] = defaultdict(float)
        for step, ms in nn.items():
            if step not in conv_steps:
                op, kernel = kinds[step]
                other[f"{op} ({kernel})"] += pick(ms)
        print("outside convolutions, nnhal: " + ", ".join(f"{k} {v:.3f}" for k, v in
                                                         sorted(other.items(), key=lambda kv: -kv[1])))
        print("outside convolutions, onnxruntime: " + ", ".join(f"{k} {v:.3f}" for k, v in
                                                               sorted(ort_other.items(), key=lambda kv: -kv[1])))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
