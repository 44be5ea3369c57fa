"""Where the fixed cost of one ``Session.run`` goes: each layer of the run path called on its own, innermost
first, A/B against onnxruntime in one process, alternating blocks, on the calling thread's CPU clock.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/run_layers.py [--rounds 15] [--nodes 1,5]
        [--models bert_mini,gpt_prefill --calls 20]   (tuned corpus models: Session.run, general path, ort)

Models: x (1, 64) float32 -> one Add of a constant, or N MatMuls by (64, 64) constants -> y. A layer's own
cost is its row minus the row below it: ``chunks`` is the generated straight-line code alone (the kernels),
``plan.run`` adds the buffer-set take/return and slot filling, ``cpu_run`` the thread settings, ``scheduler``
the subgraph view, device lock, output check and output collection, ``begin+run`` the run's execution copy,
``execute`` the feed checks, shape key and read lock, ``Session.run`` its own frame. ``general`` is
``Session.run`` with the direct run of a one-subgraph graph switched off (the scheduler's general path,
scheduler/default.py), for an A/B in the same process.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h

import nnhal
from nnhal import api
from nnhal.scheduler import default as sched


def tiny(n: int, seed: int = 0) -> onnx.ModelProto:
    """x (1, 64) -> y, opset 17: one Add of a constant (n = 1), or n MatMuls by (64, 64) constants (nothing folds)."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i in range(n):
        out = f"t{i}" if i < n - 1 else "y"
        shape = (1, 64) if n == 1 else (64, 64)
        inits.append(onnx.numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), f"c{i}"))
        nodes.append(h.make_node("Add" if n == 1 else "MatMul", [prev, f"c{i}"], [out]))
        prev = out
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 64])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 64])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def layers(model: onnx.ModelProto, x: dict) -> dict:
    """name -> a callable running one layer of the run path (and everything below it) once."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    o = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    s = nnhal.Session(model, devices=["cpu"], num_thread=2)
    want = o.run(None, x)[0]
    np.testing.assert_allclose(s.run(x)[0], want, rtol=1e-5, atol=1e-5)
    general = nnhal.Session(model, devices=["cpu"], num_thread=2)     # the same without the direct run
    general.run(x)
    for e in general.graph.entries.values():
        e.direct = None
    g = s.graph
    entry = next(iter(g.entries.values()))
    prepared = entry.prepared
    ex = prepared.begin(x)
    (sg,) = ex.subgraphs
    device = ex.devices[sg.device]
    view = sg.for_run(dict(x))
    plan = sg.device_graph
    buffers = plan.take()
    slots = list(plan.slots)
    for name, idx in plan.inputs:
        slots[idx] = x[name]
    bound = plan.bound(buffers)
    chunks, per_step, arena = plan.chunks, buffers.per_step, buffers.arena

    def chunk_run():
        for c in chunks:
            c.run(slots, per_step, arena, bound)

    values = dict(x)
    run_fn = device.interface.run
    execute = api.execute
    options = s.options
    return {
        "ort": lambda: o.run(None, x),
        "Session.run": lambda: s.run(x),
        "  general": lambda: general.run(x),
        "execute": lambda: execute(g, x, options),
        "begin+run": lambda: prepared.run(x),
        "scheduler": lambda: sched._execute(ex),
        "cpu_run": lambda: run_fn(device, view),
        "plan.run": lambda: plan.run(values, False),
        "chunks": chunk_run,
    }


def timer(f, calls: int) -> float:
    clock = time.thread_time_ns
    t = clock()
    for _ in range(calls):
        f()
    return (clock() - t) / calls / 1e3


def sessions(model: onnx.ModelProto, feeds: dict) -> dict:
    """ort, Session.run and the general path (the direct run switched off) on one model, for an A/B."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    o = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    s = nnhal.Session(model, devices=["cpu"], num_thread=2)
    general = nnhal.Session(model, devices=["cpu"], num_thread=2)
    for a, b in zip(s.run(feeds), general.run(feeds)):
        np.testing.assert_array_equal(a, b)
    for e in general.graph.entries.values():
        e.direct = None
    direct = next(iter(s.graph.entries.values())).direct is not None
    return {"ort": lambda: o.run(None, feeds), "Session.run": lambda: s.run(feeds),
            "general": lambda: general.run(feeds)}, direct


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--nodes", default="1,5")
    ap.add_argument("--models", default="", help="tuned corpus models to A/B instead (Session.run, general, ort)")
    args = ap.parse_args()
    print(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')} (should be None); median us per call over "
          f"{args.rounds} alternating blocks of {args.calls} (thread CPU clock)")
    if args.models:
        from chain_overhead import tuned

        for name, model, feeds in tuned(args.models):
            fns, direct = sessions(model, feeds)
            for f in fns.values():
                timer(f, 5)
            got = {k: [] for k in fns}
            for _ in range(args.rounds):
                for k, f in fns.items():
                    got[k].append(timer(f, args.calls))
            med = {k: statistics.median(v) for k, v in got.items()}
            print(f"{name:12s} direct={direct}  " + "  ".join(f"{k} {v:9.1f}" for k, v in med.items()) +
                  f"  Session.run/general {med['Session.run'] / med['general']:.3f}")
        return
    x = {"x": np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)}
    for n in map(int, args.nodes.split(",")):
        fns = layers(tiny(n), x)
        for f in fns.values():
            timer(f, 200)
        got: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(args.rounds):
            for k, f in fns.items():
                got[k].append(timer(f, args.calls))
        med = {k: statistics.median(v) for k, v in got.items()}
        names = list(fns)
        what = "1 Add node" if n == 1 else f"{n} MatMul nodes"
        print(f"-- {what}; Session.run / ort = {med['Session.run'] / med['ort']:.2f}")
        layered = [k for k in names if not k.startswith(" ")]
        for k in names:
            i = layered.index(k) if k in layered else 0
            below = med[layered[i + 1]] if 0 < i < len(layered) - 1 else 0.0
            own = "" if k == "ort" or k not in layered else f"  own {med[k] - below:6.2f}"
            print(f"{k:12s} {med[k]:7.2f} us (min {min(got[k]):6.2f}){own}")


if __name__ == "__main__":
    main()
