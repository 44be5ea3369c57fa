"""Per-step framework cost of a CPU plan: chains of N identical small ops at (1, 64) float32 (plus a mini encoder
layer, and chains of convolutions and MaxPools on small maps: CONV_KINDS, slope from N=1 to N=16), onnxruntime
against nnhal with bound steps (device/cpu/straight.py bind) and without, A/B in one process.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/chain_overhead.py [--rounds 7] [--kinds mm,sm]

Prints per chain and N the median microseconds per run of each and the marginal cost per step (the slope from
N=1 to N=60) of the medians and of the minima over the alternating blocks. "nnhal plain" prepares the same
model with binding switched off (straight._bind_sources answering None), so both nnhal columns run the same
kernels. The OpenBLAS variables should be unset (see README.md).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import time
from functools import partial

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h

import nnhal
from nnhal.device.cpu import straight

W = 64


def chain(n: int, kind: str, seed: int = 0) -> onnx.ModelProto:
    """x (1, 64) -> n nodes of ``kind`` (gemm_relu: Gemm + Relu, tr: Transpose of (1, 8, 8) + Neg) -> y."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    shape = [1, 8, 8] if kind == "tr" else [1, W]
    for i in range(n):
        out = f"t{i}" if i < n - 1 else "y"
        if kind == "mm":
            inits.append(onnx.numpy_helper.from_array((rng.standard_normal((W, W)) * 0.1).astype(np.float32), f"w{i}"))
            nodes.append(h.make_node("MatMul", [prev, f"w{i}"], [out]))
        elif kind == "gemm_relu":
            inits.append(onnx.numpy_helper.from_array((rng.standard_normal((W, W)) * 0.1).astype(np.float32), f"w{i}"))
            inits.append(onnx.numpy_helper.from_array(rng.standard_normal(W).astype(np.float32), f"c{i}"))
            nodes += [h.make_node("Gemm", [prev, f"w{i}", f"c{i}"], [f"g{i}"], transB=1),
                      h.make_node("Relu", [f"g{i}"], [out])]
        elif kind == "ln":
            inits.append(onnx.numpy_helper.from_array(np.ones(W, np.float32), f"g{i}"))
            inits.append(onnx.numpy_helper.from_array(np.zeros(W, np.float32), f"b{i}"))
            nodes.append(h.make_node("LayerNormalization", [prev, f"g{i}", f"b{i}"], [out], axis=-1))
        elif kind == "sm":
            nodes.append(h.make_node("Softmax", [prev], [out], axis=-1))
        elif kind == "gather":
            inits.append(onnx.numpy_helper.from_array(rng.permutation(W).astype(np.int64), f"i{i}"))
            nodes.append(h.make_node("Gather", [prev, f"i{i}"], [out], axis=1))
        elif kind == "tr":      # a Neg after each: the optimizer merges consecutive Transposes into one
            nodes += [h.make_node("Transpose", [prev], [f"p{i}"], perm=[0, 2, 1]), h.make_node("Neg", [f"p{i}"], [out])]
        prev = out
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, shape)],
                     [h.make_tensor_value_info("y", T.FLOAT, shape)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


# convolution and pooling chains (issue 27's bound conv steps): kind -> (channels, side, kernel, group); a fused
# Relu after each conv; a pool is a 3x3 stride-1 window padded by 1
# (on a CPU without AVX-512: 3x3 64->64 at 14x14 runs the native Winograd, at 7x7 and the 64-channel 1x1 the direct
# kernel, the 192-channel 1x1 the prepared GEMM, 128->128 3x3 at 14x14 the native im2col)
CONV_KINDS = {"conv3x3_14": (64, 14, 3, 1), "conv3x3_7": (64, 7, 3, 1), "conv1x1_28": (64, 28, 1, 1),
              "conv1x1w_28": (192, 28, 1, 1), "conv3x3w_7": (128, 7, 3, 1), "dw3x3_14": (128, 14, 3, 128),
              "maxpool_14": (64, 14, 3, 0)}


def conv_chain(n: int, kind: str, seed: int = 0) -> onnx.ModelProto:
    """x (1, C, S, S) -> n identical convs (+ Relu) or MaxPools of ``kind`` (CONV_KINDS) -> y, channels kept."""
    c, side, k, group = CONV_KINDS[kind]
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i in range(n):
        out = f"t{i}" if i < n - 1 else "y"
        if group == 0:
            nodes.append(h.make_node("MaxPool", [prev], [out], kernel_shape=[k, k], pads=[k // 2] * 4))
        else:
            w = rng.standard_normal((c, c // group, k, k)) / np.sqrt(c // group * k * k)
            inits += [onnx.numpy_helper.from_array(w.astype(np.float32), f"w{i}"),
                      onnx.numpy_helper.from_array((rng.standard_normal(c) * 0.1).astype(np.float32), f"b{i}")]
            nodes += [h.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], kernel_shape=[k, k], pads=[k // 2] * 4,
                                  group=group),
                      h.make_node("Relu", [f"c{i}"], [out])]
        prev = out
    shape = [1, c, side, side]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, shape)],
                     [h.make_tensor_value_info("y", T.FLOAT, shape)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def cnn(kind: str) -> tuple[onnx.ModelProto, dict]:
    """A small CNN of torch modules, seeded, exported at opset 17, and its input: ``basic`` a ResNet-18-style net of
    basic blocks (64 -> 512 channels, 56x56 -> 7x7 after the stem), ``se`` a net of squeeze-excite blocks (3x3 conv,
    global pool, two 1x1 convs, sigmoid gate) on 28x28 and 14x14 maps."""
    import torch
    from torch import nn

    class Basic(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1)
            self.skip = nn.Conv2d(cin, cout, 1, stride) if stride != 1 or cin != cout else nn.Identity()

        def forward(self, x):
            return torch.relu(self.c2(torch.relu(self.c1(x))) + self.skip(x))

    class SE(nn.Module):
        def __init__(self, c: int, stride: int):
            super().__init__()
            self.conv = nn.Conv2d(c, c, 3, stride, 1)
            self.fc1, self.fc2 = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

        def forward(self, x):
            y = torch.relu(self.conv(x))
            g = torch.sigmoid(self.fc2(torch.relu(self.fc1(y.mean((2, 3), keepdim=True)))))
            return y * g

    torch.manual_seed(0)
    if kind == "basic":
        stem = [nn.Conv2d(3, 64, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
        blocks = [Basic(64, 64, 1), Basic(64, 64, 1), Basic(64, 128, 2), Basic(128, 128, 1), Basic(128, 256, 2),
                  Basic(256, 256, 1), Basic(256, 512, 2), Basic(512, 512, 1)]
        head = [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 10)]
        model, x = nn.Sequential(*stem, *blocks, *head), (1, 3, 112, 112)
    else:
        blocks = [nn.Conv2d(3, 32, 3, 2, 1), SE(32, 1), SE(32, 1), nn.Conv2d(32, 64, 1), SE(64, 2), SE(64, 1)]
        model, x = nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)), (1, 3, 56, 56)
    buf = io.BytesIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(model.eval(), (torch.randn(*x),), buf, opset_version=17, dynamo=False, input_names=["x"],
                          output_names=["y"])
    return onnx.load_from_string(buf.getvalue()), {"x": np.random.default_rng(1).standard_normal(x).astype(np.float32)}


def encoder(n: int) -> onnx.ModelProto:
    """n torch TransformerEncoderLayers (d_model 64, 4 heads, feed-forward 128) on (1, 16, 64), seeded, opset 17."""
    import torch

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, n, enable_nested_tensor=False).eval()
    buf = io.BytesIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(model, (torch.randn(1, 16, 64),), buf, opset_version=17, dynamo=False,
                          input_names=["x"], output_names=["y"])
    return onnx.load_from_string(buf.getvalue())


CLOCK = time.perf_counter


def timer(f, calls: int) -> float:
    t = CLOCK()
    for _ in range(calls):
        f()
    return (CLOCK() - t) / calls * 1e6


def plain_session(model, x: dict) -> nnhal.Session:
    """A Session of ``model`` prepared (at its first run) with no step bound."""
    saved = straight._bind_sources
    straight._bind_sources = lambda *a: None
    try:
        session = nnhal.Session(model, devices=["cpu"], num_thread=2)
        session.run(x)
        return session
    finally:
        straight._bind_sources = saved


def measure(model, rounds: int, calls: int, x: dict | None = None) -> dict[str, float]:
    """Median (and min) microseconds per run of onnxruntime, bound and unbound nnhal on ``model``, alternating."""
    if x is None:
        shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        x = {"x": np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    o = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    bound = nnhal.Session(model, devices=["cpu"], num_thread=2)
    plain = plain_session(model, x)
    fns = {"ort": lambda: o.run(None, x), "bound": lambda: bound.run(x), "plain": lambda: plain.run(x)}
    for a, b in zip(bound.run(x), plain.run(x)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    for f in fns.values():
        timer(f, 100)
    got: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):          # alternating blocks
        for k, f in fns.items():
            got[k].append(timer(f, calls))
    bound.close()
    plain.close()
    return {k: statistics.median(v) for k, v in got.items()} | {f"{k} min": min(v) for k, v in got.items()}


def tuned(names: str):
    """(name, model, feeds) of each comma-separated name: basic and se (cnn), or a corpus model of the tuned half
    (any other is refused)."""
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from corpus import registry

    for name in names.split(","):
        if name in ("basic", "se"):
            yield (name, *cnn(name))
            continue
        if name not in registry.TUNED:
            raise SystemExit(f"{name}: not a tuned corpus model")
        yield (name, *registry.load(name))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--kinds", default="mm,ln,sm,gemm_relu,gather,tr,enc",
                    help=f"also the convolution and pooling chains: {','.join(CONV_KINDS)}")
    ap.add_argument("--models", default="", help="corpus models (benchmarks/corpus, tuned half only) to A/B "
                                                 "instead; also basic, se: small seeded torch CNNs (cnn)")
    ap.add_argument("--clock", choices=("wall", "thread"), default="wall",
                    help="thread: this thread's CPU time (time.thread_time), which leaves out the time other jobs "
                         "hold the core: steadier on a loaded machine, and fair where both engines run small ops "
                         "on the calling thread")
    args = ap.parse_args()
    global CLOCK
    CLOCK = time.thread_time if args.clock == "thread" else time.perf_counter
    print(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')} (should be None); median us per run "
          f"({args.clock} clock)")
    if args.models:
        for name, model, feeds in tuned(args.models):
            r = measure(model, args.rounds, args.calls, feeds)
            print(f"{name:12s} ort {r['ort']:8.1f}  bound {r['bound']:8.1f}  plain {r['plain']:8.1f}  (min: ort "
                  f"{r['ort min']:.1f} bound {r['bound min']:.1f} plain {r['plain min']:.1f})  bound/plain "
                  f"{r['bound'] / r['plain']:.3f}")
        return
    for kind in args.kinds.split(","):
        sizes = (1, 4) if kind == "enc" else (1, 16) if kind in CONV_KINDS else (1, 20, 60)
        make = encoder if kind == "enc" else partial(conv_chain, kind=kind) if kind in CONV_KINDS \
            else partial(chain, kind=kind)
        calls = max(10, args.calls // 10) if kind in CONV_KINDS else args.calls
        res = {n: measure(make(n), args.rounds, calls) for n in sizes}
        lo, hi = sizes[0], sizes[-1]
        for n in sizes:
            r = res[n]
            print(f"{kind:10s} N={n:3d}  ort {r['ort']:7.1f}  nnhal bound {r['bound']:7.1f}  plain {r['plain']:7.1f}")
        slope = {k: (res[hi][k] - res[lo][k]) / (hi - lo) for k in res[lo]}
        unit = "layer" if kind == "enc" else "step"
        for m in ("", " min"):
            print(f"{kind:10s} marginal us/{unit}{m or ' median'}: ort {slope['ort' + m]:.2f}  bound "
                  f"{slope['bound' + m]:.2f}  plain {slope['plain' + m]:.2f}  bound/ort "
                  f"{slope['bound' + m] / slope['ort' + m]:.2f}")


if __name__ == "__main__":
    main()
