"""Convolutions whose weights are run-time tensors (issue 27): a SiamRPN++-like tracker and single Conv nodes,
nnhal with its dynamic-weight kernels (conv.ConvDynamic, _conv_nhwc.ConvDynamicNHWC) against nnhal without
them (the reference im2col kernel, as before) and onnxruntime, all in one process.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/dynamic_conv.py [--rounds 20] [--threads 0]

The tracker is benchmarks/models/siamrpn.py (seeded: a shared backbone on a 127x127 template and a 255x255
search image, two depthwise cross-correlation heads, one plain cross-correlation); the single nodes are
SiamRPN++'s depthwise xcorr (256 channels, 5x5 kernels over 28x28), SiamFC's plain xcorr (256-channel 6x6
kernel over 22x22, one output), a dynamic grouped 3x3 filter and a strided, dilated one, each with its
weights a graph input. Every session is prepared and checked against onnxruntime first; then the three
run in turn, one run each per round, so a change in the machine's load hits all alike; the table gives
median milliseconds and the ratios. Never used by tests.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# (name, x shape, w shape, group, strides, dilations, pads)
NODES = (
    ("dw-xcorr", (1, 256, 28, 28), (256, 1, 5, 5), 256, (1, 1), (1, 1), (0, 0, 0, 0)),
    ("xcorr", (1, 256, 22, 22), (1, 256, 6, 6), 1, (1, 1), (1, 1), (0, 0, 0, 0)),
    ("dynfilter-g4", (1, 64, 56, 56), (64, 16, 3, 3), 4, (1, 1), (1, 1), (1, 1, 1, 1)),
    ("dynconv-s2-d2", (1, 32, 57, 55), (48, 32, 3, 3), 1, (2, 2), (2, 2), (2, 1, 2, 1)),
)


def node_model(x_shape, w_shape, group, strides, dilations, pads) -> tuple[bytes, dict]:
    """One Conv whose input and weights are both graph inputs, and seeded feeds."""
    from onnx import TensorProto, helper

    node = helper.make_node("Conv", ["x", "w"], ["y"], group=group, strides=list(strides),
                            dilations=list(dilations), pads=list(pads))
    graph = helper.make_graph([node], "dynamic_conv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
                               helper.make_tensor_value_info("w", TensorProto.FLOAT, w_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32),
             "w": rng.standard_normal(w_shape).astype(np.float32)}
    return model.SerializeToString(), feeds


def measure(name: str, model: bytes, feeds: dict, rounds: int, threads: int) -> dict:
    """Prepared sessions checked against onnxruntime, then ``rounds`` interleaved rounds; medians in ms."""
    import onnxruntime as ort

    import nnhal
    from nnhal.device.cpu.kernels import _conv_nhwc, conv

    opts = {"num_thread": threads} if threads else {}
    ort_opts = ort.SessionOptions()
    if threads:
        ort_opts.intra_op_num_threads = threads
    ss = {"ort": ort.InferenceSession(model, ort_opts, providers=["CPUExecutionProvider"]),
          "new": nnhal.Session(model, devices=["cpu"], **opts)}
    # nnhal without the dynamic-weight kernels: scored out while it prepares (on its first run)
    saved = conv.ConvDynamic.score, _conv_nhwc.ConvDynamicNHWC.score
    conv.ConvDynamic.score = _conv_nhwc.ConvDynamicNHWC.score = lambda self, node, ins, outs: 0
    try:
        ss["old"] = nnhal.Session(model, devices=["cpu"], **opts)
        ss["old"].run(feeds)
    finally:
        conv.ConvDynamic.score, _conv_nhwc.ConvDynamicNHWC.score = saved
    want = ss["ort"].run(None, feeds)
    for key in ("new", "old"):
        for g, w in zip(ss[key].run(feeds), want):
            err = float(np.abs(g - w).max() / max(1e-30, float(np.abs(w).max())))
            if err > 1e-4:
                raise SystemExit(f"{name}: nnhal ({key}) differs from onnxruntime by {err:.2e} of the largest output")
    runs = {"new": lambda: ss["new"].run(feeds), "old": lambda: ss["old"].run(feeds),
            "ort": lambda: ss["ort"].run(None, feeds)}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(rounds):
        for key, fn in runs.items():
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    return {"name": name, **med, "new/old": med["new"] / med["old"], "new/ort": med["new"] / med["ort"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--threads", type=int, default=0, help="0: each runtime's default")
    parser.add_argument("--only", default="", help="comma-separated case names (tracker, dw-xcorr, ...)")
    args = parser.parse_args(argv)
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if var in os.environ:
            print(f"warning: {var} is set; unset it for timing (env -u {var})", file=sys.stderr)
    from models import siamrpn

    cases = [("tracker", *siamrpn.build())] + [(name, *node_model(*spec)) for name, *spec in NODES]
    only = {n for n in args.only.split(",") if n}
    print(f"{'case':<16}{'new ms':>9}{'old ms':>9}{'ort ms':>9}{'new/old':>9}{'new/ort':>9}")
    for name, model, feeds in cases:
        if only and name not in only:
            continue
        r = measure(name, model, feeds, args.rounds, args.threads)
        print(f"{name:<16}{r['new']:>9.3f}{r['old']:>9.3f}{r['ort']:>9.3f}{r['new/old']:>9.2f}{r['new/ort']:>9.2f}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
