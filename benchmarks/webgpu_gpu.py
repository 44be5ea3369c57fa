"""webgpu on a real GPU: accuracy and latency beside PyTorch (CUDA eager, CUDA graphs), the cpu device and onnxruntime.

    python benchmarks/webgpu_gpu.py --out DIR [--jobs resnet50,bert,...] [--deadline-s 330] [--quick]

Written for one time-boxed call on a lent GPU machine (docs/webgpu.md, "On an NVIDIA H200 through Vulkan"), and
rehearsed on Mesa's lavapipe with torch on the CPU (--quick). The driver prints the adapters wgpu sees (info,
features, limits) and then runs each job in its own process under a timeout, so a hang or a crash costs one job;
the driver never starts a job it cannot finish before --deadline-s. A job ``NAME`` or ``NAME@BATCH``:

  zoo models (seeded random weights, ``zoo:NAME?weights=random``): squeezenet, resnet50, inception_v1, densenet121,
      timed beside the torchvision model of the same architecture with its own random weights
      (squeezenet1_0, resnet50, googlenet, densenet121);
  bert: nnhal.models.bert's encoder (6 layers, 384 hidden, 12 heads, seq 128) with the weights of a torch
      module of the same structure (TorchBert below), so PyTorch's output is checked against onnxruntime too;
  bert_mini: the corpus's torch-exported BertMini ONNX (benchmarks/.cache/corpus/), accuracy and nnhal/ort only;
  overhead: webgpu's per-run floor (one tiny dispatch: write, submit, map) and the cost of each further dispatch
      (a chain of 64 tiny MatMuls).

Per job: relative error (max |diff| / max |ref| over all outputs) of webgpu fp32 (and fp16 where the adapter has
shader-f16) against onnxruntime CPU fp32; median latency of webgpu (numpy in, numpy out: upload, one submit,
readback), PyTorch eager fp32 and CUDA-graph replay (device-resident input and output, CUDA events, TF32 off), the
cpu device and onnxruntime CPU (all cores); dispatches per run and the GPU's own time for them (timestamp queries,
one profiled run). Results: DIR/results.json (one record per job, partial records kept when a job dies), DIR/table.md.
--variants times only webgpu fp32 with the tiled GEMM's K step at 16/32/64 and the register-only GEMM.

On a machine with no package index (the 2026-11-28 H200 run): carry the wheels wgpu, cffi, pycparser, sniffio,
rendercanvas (cp312, manylinux) and Debian's libvulkan1 + libglvnd debs; there, `dpkg -x` the debs to /, ldconfig,
export VK_DRIVER_FILES=<the NVIDIA ICD json>, `pip install --no-index --no-deps --target /tmp/site` the wheels,
`pip install --no-index --no-build-isolation --no-deps --upgrade --target /tmp/nn <this tree>`, then run this
script with PYTHONPATH=/tmp/nn:/tmp/site under `timeout`, --deadline-s a little under it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
JOBS = ["overhead", "resnet50", "bert", "densenet121", "inception_v1", "squeezenet", "resnet50@64", "bert_mini"]
TORCHVISION = {"squeezenet": "squeezenet1_0", "resnet50": "resnet50", "inception_v1": "googlenet",
               "densenet121": "densenet121"}
BERT = {"layers": 6, "hidden": 384, "heads": 12, "seq": 128, "vocab": 30522, "max_position": 512}


# ------------------------------------------------------------------ the driver
def adapters() -> dict:
    """What wgpu sees: every adapter's info, features and the limits nnhal uses; then nnhal's own summary."""
    import wgpu

    out = {"wgpu": wgpu.__version__, "adapters": []}
    keep = ("max-storage-buffer-binding-size", "max-buffer-size", "max-storage-buffers-per-shader-stage",
            "max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup",
            "max-compute-workgroups-per-dimension", "max-compute-workgroup-size-x")
    for a in wgpu.gpu.enumerate_adapters_sync():
        out["adapters"].append({"info": dict(a.info), "features": sorted(a.features),
                                "limits": {k: a.limits[k] for k in keep if k in a.limits}})
    import nnhal
    from nnhal.device.manager import find_device

    nnhal.init()
    desc = find_device("webgpu").describe()
    out["nnhal"] = {"summary": desc.summary, "precisions": sorted(desc.precisions), "ops": len(desc.ops)}
    try:
        import torch

        out["torch"] = {"version": torch.__version__, "cuda": torch.cuda.is_available(),
                        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}
    except ImportError:
        out["torch"] = None
    return out


def drive(args) -> int:
    start = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="webgpu_gpu-"))   # per-job records; DIR keeps only the merged ones
    results: list[dict] = []

    def spawn(argv: list[str], budget: float, name: str) -> None:
        left = args.deadline_s - (time.monotonic() - start)
        if left < min(budget, 20):
            print(f"[{name}] skipped: {left:.0f} s left before the deadline", flush=True)
            results.append({"job": name, "skipped": f"{left:.0f} s left"})
            return
        t0 = time.monotonic()
        record = scratch / f"{name.replace('@', '_b')}.json"
        cmd = [sys.executable, __file__, *argv, "--record", str(record)] + (["--quick"] if args.quick else [])
        try:
            rc = subprocess.run(cmd, timeout=min(budget, left)).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        got = json.loads(record.read_text()) if record.exists() else {"job": name}
        if rc != 0:
            got["failed"] = f"exit {rc}"
        got["job_s"] = round(time.monotonic() - t0, 1)
        results.append(got)
        (out / "results.json").write_text(json.dumps(results, indent=1))
        print(f"[{name}] {json.dumps(got)}", flush=True)

    spawn(["--info"], 90, "info")
    for job in [j for j in args.jobs.split(",") if j]:
        spawn(["--job", job] + (["--variants"] if args.variants else []),
              args.job_timeout * (2 if "@" in job else 1), job)
    table = render(results)
    (out / "table.md").write_text(table)
    print(table, flush=True)
    print(f"total {time.monotonic() - start:.0f} s", flush=True)
    return 0


def _fmt(v, spec: str = ".2f") -> str:
    if v is None:
        return "-"
    return format(v, spec) if isinstance(v, (int, float)) else str(v)


def render(results: list[dict]) -> str:
    rows = ["| model | batch | webgpu fp32 ms | again | webgpu fp16 ms | torch eager ms "
            "| torch graph ms | nnhal cpu ms | ort cpu ms | dispatches | GPU busy ms | prepare s | rel err fp32 "
            "| rel err fp16 | torch rel err |",
            "|" + "---|" * 15]
    for r in results:
        if "model" not in r or r["model"] == "overhead":
            continue
        rows.append("| " + " | ".join([
            r["model"], str(r.get("batch", 1)), _fmt(r.get("webgpu_ms")), _fmt(r.get("webgpu_again_ms")),
            _fmt(r.get("webgpu_fp16_ms")),
            _fmt(r.get("torch_eager_ms")), _fmt(r.get("torch_graph_ms")), _fmt(r.get("cpu_ms")),
            _fmt(r.get("ort_ms")), _fmt(r.get("dispatches"), "d"), _fmt(r.get("gpu_busy_ms")),
            _fmt(r.get("prepare_s")), _fmt(r.get("rel_fp32"), ".1e"), _fmt(r.get("rel_fp16"), ".1e"),
            _fmt(r.get("torch_rel"), ".1e")]) + " |")
    for r in results:
        if "tk16_ms" in r or "tk16_error" in r:
            cells = [f"{v}: {_fmt(r.get(f'{v}_ms'))} ms (busy {_fmt(r.get(f'{v}_busy_ms'))}, err "
                     f"{_fmt(r.get(f'{v}_rel'), '.1e')})" if f"{v}_ms" in r else f"{v}: {r.get(f'{v}_error')}"
                     for v in GEMM_VARIANTS]
            rows.append(f"{r['job']}: " + "; ".join(cells))
    over = next((r for r in results if r.get("job") == "overhead" and "floor_ms" in r), None)
    if over:
        rows.append(f"\nwebgpu per-run floor (1 dispatch, write + submit + map): {over['floor_ms']:.3f} ms; "
                    f"each further dispatch: {over['per_dispatch_us']:.1f} us ({over['chain']} chained MatMuls: "
                    f"{over['chain_ms']:.3f} ms)")
    failed = [f"{r['job']}: {r.get('failed') or r.get('skipped')}" for r in results
              if r.get("failed") or r.get("skipped")]
    if failed:
        rows.append("\nnot complete: " + "; ".join(failed))
    return "\n".join(rows) + "\n"


# ------------------------------------------------------------------ one job
class Record(dict):
    """The job's results, written to disk after every part so a timeout keeps what was measured."""

    def __init__(self, path: str, **kw) -> None:
        super().__init__(**kw)
        self.path = path

    def put(self, **kw) -> None:
        self.update(kw)
        Path(self.path).write_text(json.dumps(self))
        print(f"  {kw}", flush=True)


def _median_ms(fn, warmup: int, repeat: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _rel(got: list, want: list) -> float:
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if g.shape != w.shape or not np.all(np.isfinite(g)):
            return float("inf")
        worst = max(worst, float(np.max(np.abs(g - w)) / max(np.max(np.abs(w)), 1e-30)))
    return worst


def _threads() -> int:
    return min(os.cpu_count() or 1, 16)


def _nnhal_session(model, feeds, devices, precision="fp32", options=None):
    import nnhal
    from nnhal import api

    s = nnhal.Session(model, devices=devices, num_thread=_threads(), strict=True, precision=precision,
                      device_options=options)
    for k, v in feeds.items():
        api.set_graph_input(s.graph, k, v)
    api.prerun_graph(s.graph, s.options)
    return s


def _load(name: str, batch: int):
    """(ONNX model, feeds, torch module or None, torch inputs as numpy)."""
    import onnx

    if name == "bert":
        from nnhal.models.bert import bert_inputs, build_bert

        module = TorchBert() if _torch() else None
        weights = ({k: v.detach().numpy() for k, v in module.state_dict().items()} if module is not None else None)
        model = build_bert(layers=BERT["layers"], hidden=BERT["hidden"], heads=BERT["heads"], seq=None,
                           weights=weights)
        feeds = bert_inputs(batch, BERT["seq"])
        return model, feeds, module, [feeds["input_ids"], feeds["attention_mask"], feeds["token_type_ids"]]
    if name == "bert_mini":
        found = sorted((HERE / ".cache" / "corpus").glob("bert_mini-*.onnx")) + sorted(HERE.glob("bert_mini*.onnx"))
        if not found:
            raise FileNotFoundError("no bert_mini ONNX: run benchmarks/corpus.py --models bert_mini once")
        sys.path.insert(0, str(HERE))
        from corpus.registry import _bert

        return onnx.load(str(found[0])), _bert(), None, None
    from nnhal.benchmark.run import load_model

    model, feeds = load_model(name, batch)
    last = model.graph.node[-1]
    if last.op_type == "Softmax":   # compare logits: a softmax of random-weight logits saturates to one-hot
        del model.graph.node[-1]
        del model.graph.output[:]
        model.graph.output.extend([onnx.helper.make_tensor_value_info(last.input[0], onnx.TensorProto.FLOAT, None)])
    module = None
    if _torch() and name in TORCHVISION:
        import torch

        try:
            import torchvision
        except (ImportError, RuntimeError) as exc:   # a torchvision built for another torch fails at import
            print(f"  torchvision unavailable: {exc}", flush=True)
            return model, feeds, None, list(feeds.values())
        torch.manual_seed(0)
        kw = {"aux_logits": False, "init_weights": True} if name == "inception_v1" else {}
        module = getattr(torchvision.models, TORCHVISION[name])(weights=None, **kw)
    return model, feeds, module, list(feeds.values())


def _torch():
    try:
        import torch

        return torch
    except ImportError:
        return None


def run_job(job: str, record: str, quick: bool, variants: bool = False) -> None:
    name, _, b = job.partition("@")
    batch = int(b or 1)
    if quick:
        BERT.update(layers=2, seq=32)   # the rehearsal on lavapipe: the same graph, smaller
    rec = Record(record, job=job, model=name, batch=batch)
    if name == "overhead":
        return overhead(rec, quick)
    if variants:
        return gemm_variants(rec, name, batch, quick)
    import onnxruntime as ort

    model, feeds, module, torch_inputs = _load(name, batch)
    heavy = batch > 8
    gpu_reps = 3 if quick else (10 if heavy else 30)
    cpu_reps = 1 if quick else (3 if heavy else 10)
    so = ort.SessionOptions()
    so.intra_op_num_threads = _threads()
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    rec.put(ort_ms=_median_ms(lambda: sess.run(None, feeds), 1, cpu_reps), threads=_threads())

    import nnhal
    from nnhal.device.manager import find_device

    nnhal.init()   # registers the devices (a Session would do it too, but the record is asked first)
    desc = find_device("webgpu").describe()
    if desc.ops:
        webgpu_times(rec, model, feeds, want, gpu_reps, "fp16" in desc.precisions)
    else:   # NOTE: never label cpu numbers as webgpu's: record why and measure the others
        rec.put(webgpu_unavailable=desc.summary)

    cpu = _nnhal_session(model, feeds, ["cpu"])
    rec.put(cpu_ms=_median_ms(lambda: cpu.run(feeds), 1, cpu_reps))
    cpu.close()

    if module is not None:
        torch_times(rec, module, torch_inputs, want if name == "bert" else None, quick, heavy)


def webgpu_times(rec: Record, model, feeds: dict, want: list, reps: int, fp16: bool) -> None:
    """Prepare, accuracy and latency on webgpu at fp32 (and fp16), dispatches, GPU busy time of one profiled run."""
    t0 = time.perf_counter()
    gpu = _nnhal_session(model, feeds, ["webgpu", "cpu"])
    got = gpu.run(feeds)
    sgs = gpu.graph.execution.subgraphs
    rec.put(prepare_s=time.perf_counter() - t0, rel_fp32=_rel(got, want),
            dispatches=sum(sg.stats.get("webgpu_dispatches", 0) for sg in sgs if sg.device == "webgpu"),
            nodes_on_gpu=f"{sum(len(sg.nodes) for sg in sgs if sg.device == 'webgpu')}/"
                         f"{sum(len(sg.nodes) for sg in sgs)}")
    rec.put(webgpu_ms=_median_ms(lambda: gpu.run(feeds), 3, reps))
    rec.put(webgpu_again_ms=_median_ms(lambda: gpu.run(feeds), 3, reps))   # the spread of the first number
    profile = gpu.profile(feeds, runs=1)
    busy = [n for n in profile.nodes if n.device == "webgpu"]
    top = sorted(busy, key=lambda n: -n.ms)[:3]
    rec.put(gpu_busy_ms=sum(n.ms for n in busy), top_kernels=[f"{n.kernel} {n.node} {n.ms:.3f}" for n in top])
    gpu.close()
    if fp16:
        half = _nnhal_session(model, feeds, ["webgpu", "cpu"], "fp16")
        rec.put(rel_fp16=_rel(half.run(feeds), want))
        rec.put(webgpu_fp16_ms=_median_ms(lambda: half.run(feeds), 3, reps))
        half.close()


GEMM_VARIANTS = {"tk16": ({"gemm": "tiled"}, 16), "tk32": ({"gemm": "tiled"}, 32), "tk64": ({"gemm": "tiled"}, 64),
                 "direct": ({"gemm": "direct"}, 16)}


def gemm_variants(rec: Record, name: str, batch: int, quick: bool) -> None:
    """webgpu fp32 with the tiled GEMM's K step (TK) at 16 (shipped), 32 and 64, and the register-only GEMM:
    error against onnxruntime, median latency and GPU busy time of each, in one process."""
    import onnxruntime as ort

    from nnhal.device.webgpu.kernels import _gemm

    model, feeds, _, _ = _load(name, batch)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    reps = 3 if quick else (10 if batch > 8 else 30)
    keep = _gemm.TK
    for label, (options, tk) in GEMM_VARIANTS.items():
        _gemm.TK = tk   # NOTE: read when a launch's WGSL is written, i.e. in prerun
        try:
            s = _nnhal_session(model, feeds, ["webgpu", "cpu"], options={"webgpu": options})
            got = s.run(feeds)
            ms = _median_ms(lambda s=s: s.run(feeds), 3, reps)
            busy = sum(n.ms for n in s.profile(feeds, runs=1).nodes if n.device == "webgpu")
            s.close()
            rec.put(**{f"{label}_ms": ms, f"{label}_busy_ms": busy, f"{label}_rel": _rel(got, want)})
        except Exception as exc:   # one variant failing must not hide the others
            rec.put(**{f"{label}_error": f"{type(exc).__name__}: {exc}"})
        finally:
            _gemm.TK = keep


def torch_times(rec: Record, module, inputs: list, want, quick: bool, heavy: bool) -> None:
    """PyTorch fp32 (TF32 off): eager and CUDA-graph replay, device-resident tensors, median of CUDA-event times."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    module = module.to(dev).eval()
    xs = [torch.from_numpy(np.ascontiguousarray(x)).to(dev) for x in inputs]
    reps = 3 if quick else (20 if heavy else 100)

    def timed(fn) -> float:
        with torch.inference_mode():
            for _ in range(3 if quick else 10):
                fn()
            if not cuda:
                return _median_ms(fn, 0, reps)
            torch.cuda.synchronize()
            times = []
            for _ in range(reps):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b))
            return statistics.median(times)

    with torch.inference_mode():
        out = module(*xs)
    if want is not None:
        outs = out if isinstance(out, (tuple, list)) else [out]
        rec.put(torch_rel=_rel([o.float().cpu().numpy() for o in outs], want))
    rec.put(torch_eager_ms=timed(lambda: module(*xs)), torch_device=str(dev))
    if not cuda:
        return
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.inference_mode(), torch.cuda.stream(stream):
        for _ in range(3):
            module(*xs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.inference_mode(), torch.cuda.graph(graph):
        module(*xs)
    rec.put(torch_graph_ms=timed(graph.replay))


def overhead(rec: Record, quick: bool) -> None:
    """webgpu's per-run floor and per-dispatch cost: one tiny Relu, then a chain of tiny MatMuls (one launch each)."""
    from onnx import TensorProto, helper, numpy_helper

    def model(chain: int):
        nodes = [helper.make_node("Relu", ["x"], ["t0"])]
        inits = []
        for i in range(chain):
            inits.append(numpy_helper.from_array(np.eye(8, dtype=np.float32), f"w{i}"))
            nodes.append(helper.make_node("MatMul", [f"t{i}", f"w{i}"], [f"t{i + 1}"]))
        nodes.append(helper.make_node("Identity", [f"t{chain}"], ["y"]))
        g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    feeds = {"x": np.arange(8, dtype=np.float32).reshape(1, 8) - 3}
    reps = 20 if quick else 300
    chain = 64
    one = _nnhal_session(model(0), feeds, ["webgpu"])
    floor = _median_ms(lambda: one.run(feeds), 10, reps)
    many = _nnhal_session(model(chain), feeds, ["webgpu"])
    got = many.run(feeds)[0]
    assert np.array_equal(got, np.maximum(feeds["x"], 0)), got   # identity weights: exact
    dispatches = sum(sg.stats.get("webgpu_dispatches", 0) for sg in many.graph.execution.subgraphs)
    chain_ms = _median_ms(lambda: many.run(feeds), 10, reps)
    rec.put(floor_ms=floor, chain_ms=chain_ms, chain=chain, chain_dispatches=dispatches,
            per_dispatch_us=1e3 * (chain_ms - floor) / max(dispatches - 1, 1))


# ------------------------------------------------------------------ the torch twin of nnhal.models.bert
def _torch_bert_class():
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Layer(nn.Module):
        def __init__(self, h: int, heads: int) -> None:
            super().__init__()
            self.heads = heads
            self.attention = nn.Module()
            self.attention.self = nn.Module()
            for part in ("query", "key", "value"):
                setattr(self.attention.self, part, nn.Linear(h, h))
            self.attention.output = nn.Module()
            self.attention.output.dense, self.attention.output.LayerNorm = nn.Linear(h, h), nn.LayerNorm(h, 1e-12)
            self.intermediate = nn.Module()
            self.intermediate.dense = nn.Linear(h, 4 * h)
            self.output = nn.Module()
            self.output.dense, self.output.LayerNorm = nn.Linear(4 * h, h), nn.LayerNorm(h, 1e-12)

        def forward(self, x, bias):
            b, t, h = x.shape
            att = self.attention.self

            def split(y):
                return y.view(b, t, self.heads, h // self.heads).transpose(1, 2)

            ctx = F.scaled_dot_product_attention(split(att.query(x)), split(att.key(x)), split(att.value(x)),
                                                 attn_mask=bias)
            ctx = ctx.transpose(1, 2).reshape(b, t, h)
            x = self.attention.output.LayerNorm(self.attention.output.dense(ctx) + x)
            return self.output.LayerNorm(self.output.dense(F.gelu(self.intermediate.dense(x))) + x)

    class Bert(nn.Module):
        """Hugging Face BertModel's parameter names and math (post-norm, erf GELU, additive -1e4 mask, pooler)."""

        def __init__(self) -> None:
            super().__init__()
            h = BERT["hidden"]
            self.embeddings = nn.Module()
            self.embeddings.word_embeddings = nn.Embedding(BERT["vocab"], h)
            self.embeddings.position_embeddings = nn.Embedding(BERT["max_position"], h)
            self.embeddings.token_type_embeddings = nn.Embedding(2, h)
            self.embeddings.LayerNorm = nn.LayerNorm(h, 1e-12)
            self.encoder = nn.Module()
            self.encoder.layer = nn.ModuleList(Layer(h, BERT["heads"]) for _ in range(BERT["layers"]))
            self.pooler = nn.Module()
            self.pooler.dense = nn.Linear(h, h)

        def forward(self, ids, mask, types):
            e = self.embeddings
            pos = torch.arange(ids.shape[1], device=ids.device)[None]
            x = e.LayerNorm(e.word_embeddings(ids) + e.token_type_embeddings(types) + e.position_embeddings(pos))
            bias = (1.0 - mask[:, None, None, :].float()) * -10000.0
            for layer in self.encoder.layer:
                x = layer(x, bias)
            return x, torch.tanh(self.pooler.dense(x[:, 0]))

    return Bert


def TorchBert():  # noqa: N802 - a class factory (torch is imported only when a job needs it)
    import torch

    torch.manual_seed(0)
    module = _torch_bert_class()()
    with torch.no_grad():
        for n, p in module.named_parameters():
            if "LayerNorm" in n:
                continue
            torch.nn.init.normal_(p, std=0.02 if n.endswith("weight") else 0.01)
    return module.eval()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="webgpu_gpu_out")
    p.add_argument("--jobs", default=",".join(JOBS))
    p.add_argument("--deadline-s", type=float, default=330.0, help="start no job that could end after this")
    p.add_argument("--job-timeout", type=float, default=100.0, help="seconds per job (twice that at a batch)")
    p.add_argument("--quick", action="store_true", help="few repeats (a rehearsal on lavapipe)")
    p.add_argument("--variants", action="store_true",
                   help="only webgpu fp32 with GEMM variants (TK 16/32/64, direct) per job")
    p.add_argument("--info", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--job", help=argparse.SUPPRESS)
    p.add_argument("--record", help=argparse.SUPPRESS)
    args = p.parse_args()
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        os.environ.pop(k, None)   # NOTE: read at OpenBLAS load; the jobs are child processes, so this reaches them
    if args.info:
        info = adapters()
        Path(args.record).write_text(json.dumps({"job": "info", **info}))
        print(json.dumps(info, indent=1), flush=True)
        return 0
    if args.job:
        import faulthandler

        faulthandler.dump_traceback_later(args.job_timeout * 3, exit=True)   # backstop: the driver's timeout is first
        run_job(args.job, args.record, args.quick, args.variants)
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
