"""Per-convolution profile of nnhal int8 against nnhal fp32: time, MACs and GMAC/s of every convolution.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/int8_convs.py [--models resnet50 yolo]
        [--batch 1] [--rounds 5] [--threads 1]

Builds the models as benchmarks/int8.py does (ResNet-50 with seeded random weights, the corpus's YOLO-style
detector at 640x640), prepares nnhal fp32 and nnhal int8 (calibrated), then alternates ``Session.profile`` of
the two ``--rounds`` times and takes each node's median. Each fp32 Conv is matched with the int8 node that
carries its name (QLinearConv, possibly with a fused table or clamp). Printed per convolution shape (input
channels, output channels, kernel, stride, group, output size): count, MACs, int8 ms, fp32 ms, their ratio
and GMAC/s; then the sum per kernel size. Never used by tests.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from int8 import MODELS  # noqa: E402


def _conv_shapes(model) -> dict[str, tuple]:
    """Conv node name -> (cin, cout, kh, kw, stride, group, oh, ow, batch, MACs)."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)}
    weights = {t.name: tuple(t.dims) for t in model.graph.initializer}
    out = {}
    for node in model.graph.node:
        if node.op_type != "Conv":
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        cout, cin_g, kh, kw = weights[node.input[1]]
        group = attrs.get("group", 1)
        n, _, oh, ow = dims[node.output[0]]
        stride = tuple(attrs.get("strides", (1, 1)))[0]
        out[node.name] = (cin_g * group, cout, kh, kw, stride, group, oh, ow, n, n * oh * ow * cout * cin_g * kh * kw)
    return out


def _node_ms(profiles) -> dict[str, tuple[str, float]]:
    """node name -> (op, median ms per run) over the profiles."""
    times: dict[str, list[float]] = defaultdict(list)
    ops = {}
    for p in profiles:
        for n in p.nodes:
            times[n.node].append(n.ms)
            ops[n.node] = n.op
    return {k: (ops[k], statistics.median(v)) for k, v in times.items()}


def _match(conv: str, timed: dict[str, tuple[str, float]], ops: tuple[str, ...]) -> float | None:
    hits = [ms for name, (op, ms) in timed.items() if op in ops and (name == conv or conv in name.split("+")
                                                                     or name.startswith(conv + "::"))]
    return sum(hits) if hits else None


def profile(name: str, batch: int, rounds: int, threads: int) -> None:
    import nnhal

    model, calib, _, feeds, _ = MODELS[name](batch)
    shapes = _conv_shapes(model)
    table = nnhal.calibrate(model, calib, progress=False)
    fp32 = nnhal.Session(model, num_thread=threads)
    int8 = nnhal.Session(model, precision="int8", calibration=table, num_thread=threads)
    got = {"fp32": [], "int8": []}
    for _ in range(rounds):
        for label, session in (("int8", int8), ("fp32", fp32)):
            got[label].append(session.profile(feeds, runs=1, warmup=1))
    walls = {k: statistics.median(p.wall_ms for p in v) for k, v in got.items()}
    t8, t32 = _node_ms(got["int8"]), _node_ms(got["fp32"])
    rows: dict[tuple, list] = defaultdict(lambda: [0, 0, 0.0, 0.0])
    unmatched = 0
    for conv, shape in shapes.items():
        a = _match(conv, t8, ("QLinearConv", "ConvInteger", "Conv"))
        b = _match(conv, t32, ("Conv",))
        if a is None or b is None:
            unmatched += 1
            continue
        r = rows[shape[:8]]
        r[0] += 1
        r[1] += shape[9]
        r[2] += a
        r[3] += b
    print(f"\n{name} b{batch}, {threads} thread(s), medians of {rounds} alternating profiles: "
          f"int8 {walls['int8']:.1f} ms, fp32 {walls['fp32']:.1f} ms a run; {unmatched} convs unmatched")
    print("| cin -> cout | k | s | g | out | n | MMAC | int8 ms | fp32 ms | int8/fp32 | int8 GMAC/s | fp32 GMAC/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    total = [0, 0.0, 0.0]
    for key, (count, macs, a, b) in sorted(rows.items(), key=lambda kv: -kv[1][2]):
        cin, cout, kh, kw, s, g, oh, ow = key
        total[0] += macs
        total[1] += a
        total[2] += b
        print(f"| {cin} -> {cout} | {kh}x{kw} | {s} | {g} | {oh}x{ow} | {count} | {macs / 1e6:.0f} | {a:.2f} | "
              f"{b:.2f} | {a / b:.2f} | {macs / a / 1e6:.1f} | {macs / b / 1e6:.1f} |")
    print(f"| all | | | | | | {total[0] / 1e6:.0f} | {total[1]:.1f} | {total[2]:.1f} | {total[1] / total[2]:.2f} | "
          f"{total[0] / total[1] / 1e6:.1f} | {total[0] / total[2] / 1e6:.1f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet50", "yolo"], choices=["resnet50", "yolo"])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    np.random.seed(0)
    for name in args.models:
        profile(name, args.batch, args.rounds, args.threads)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
