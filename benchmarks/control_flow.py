"""Per-iteration cost of control flow on the CPU device: python benchmarks/control_flow.py [--repeat N].

Synthetic Loops on [1, 4] tensors: a one-Add body whose carried state keeps its shape (2,000 iterations) and a
one-Concat body whose state grows a row per iteration (200 iterations: a body that used to be re-planned every
iteration). Then the corpus's control-flow models (benchmarks/corpus: stream_loop_lstm, a Loop of 64 LSTM steps;
scan_gru, a Scan of 64 GRU-cell steps; vad_if, a whole model inside an If), exported on first use.

Each engine runs on ``--threads`` threads (2 by default, as the corpus and issue 27's acceptance), nnhal and
onnxruntime alternately in the same process; a run is timed by wall time and by the calling thread's CPU time
(time.thread_time), which a loaded machine's descheduling does not inflate but which misses time spent waiting
for other threads (BLAS workers woken per product). Prints the best of ``--repeat`` runs per iteration (per run
for vad_if) and both ratios. OPENBLAS_CORETYPE
and OPENBLAS_L2_SIZE are unset (the process re-executes itself without them). Never used by tests.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

UNSET = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
PAUSE = 0.1          # seconds before each timed block
CORPUS = (("stream_loop_lstm", 64), ("scan_gru", 64), ("vad_if", 1))


def loop_model(grow: bool, trips: int):
    state = [None, 4] if grow else [1, 4]
    op = helper.make_node("Concat", ["s_in", "one"], ["s_out"], axis=0) if grow else \
        helper.make_node("Add", ["s_in", "one"], ["s_out"])
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [op, helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []), vi("s_in", TensorProto.FLOAT, state)],
        [vi("cond_out", TensorProto.BOOL, []), vi("s_out", TensorProto.FLOAT, state)])
    inits = [numpy_helper.from_array(np.ones((1, 4), np.float32), "one"),
             numpy_helper.from_array(np.array(trips, np.int64), "m"), numpy_helper.from_array(np.array(True), "c")]
    graph = helper.make_graph([helper.make_node("Loop", ["m", "c", "x"], ["y"], body=body)], "loop",
                              [vi("x", TensorProto.FLOAT, [1, 4])], [vi("y", TensorProto.FLOAT, [None, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _best(fn, repeat: int) -> tuple[float, float]:
    """(thread CPU seconds, wall seconds) of the best of ``repeat`` calls."""
    cpu, wall = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.thread_time()
        fn()
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - t0)
    return min(cpu), min(wall)


def measure(label: str, model, feeds: dict, per: int, repeat: int, threads: int) -> None:
    import onnxruntime as ort

    import nnhal

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    o = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    with nnhal.Session(model, devices=["cpu"], num_thread=threads) as s:
        t0 = time.perf_counter()
        s.run(feeds)
        first = time.perf_counter() - t0
        o.run(None, feeds)
        n_cpu, n_wall, o_cpu, o_wall = [], [], [], []
        for _ in range(3):          # alternate blocks: both engines see the same load
            # NOTE: onnxruntime's idle workers spin for a while after its runs and would take nnhal's cores: a
            # pause before each block (as corpus.py)
            time.sleep(PAUSE)
            c, w = _best(lambda: s.run(feeds), repeat)
            n_cpu.append(c)
            n_wall.append(w)
            time.sleep(PAUSE)
            c, w = _best(lambda: o.run(None, feeds), repeat)
            o_cpu.append(c)
            o_wall.append(w)
    unit = "iteration" if per > 1 else "run"
    nc, oc = min(n_cpu) / per * 1e6, min(o_cpu) / per * 1e6
    nw, ow = min(n_wall) / per * 1e6, min(o_wall) / per * 1e6
    print(f"{label}: first run {first * 1e3:.1f} ms; us/{unit}: nnhal wall {nw:.1f} (cpu {nc:.1f}), "
          f"onnxruntime wall {ow:.1f} (cpu {oc:.1f}); ratio wall {nw / ow:.2f}, cpu {nc / oc:.2f}", flush=True)


def main(argv: list[str] | None = None) -> None:
    present = [k for k in UNSET if k in os.environ]
    if present:
        env = {k: v for k, v in os.environ.items() if k not in UNSET}
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *(argv or sys.argv[1:])], env)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default="synthetic," + ",".join(n for n, _ in CORPUS))
    args = parser.parse_args(argv)
    print(f"OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for this run; {args.threads} thread(s) per engine")
    wanted = args.models.split(",")
    x = np.zeros((1, 4), np.float32)
    if "synthetic" in wanted:
        for grow, trips in ((False, 2000), (True, 200)):
            label = f"{'growing Concat' if grow else 'fixed Add'} body, {trips} iterations"
            measure(label, loop_model(grow, trips), {"x": x}, trips, max(2, args.repeat // 3), args.threads)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from corpus import registry

    for name, per in CORPUS:
        if name in wanted:
            model, feeds = registry.load(name)
            measure(f"{name} ({per} iterations)" if per > 1 else name, model, feeds, per, args.repeat, args.threads)


if __name__ == "__main__":
    main()
