"""Per-iteration cost of a Loop on the CPU device: python benchmarks/control_flow.py.

Two Loop models on [1, 4] tensors: a one-Add body whose carried state keeps its shape (2,000 iterations)
and a one-Concat body whose state grows a row per iteration (200 iterations: a body that used to be
re-planned every iteration). Prints the first run (prepare included) and microseconds per iteration of
the best of five later runs. Never used by tests.
"""
from __future__ import annotations

import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper


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


def main() -> None:
    import nnhal

    x = np.zeros((1, 4), np.float32)
    for grow, trips in ((False, 2000), (True, 200)):
        with nnhal.Session(loop_model(grow, trips), devices=["cpu"], num_thread=1) as s:
            t0 = time.perf_counter()
            s.run({"x": x})
            first = time.perf_counter() - t0
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                s.run({"x": x})
                times.append(time.perf_counter() - t0)
        label = "growing Concat" if grow else "fixed Add"
        print(f"{label} body, {trips} iterations: first run {first * 1e3:.1f} ms, "
              f"then {min(times) / trips * 1e6:.1f} us/iteration")


if __name__ == "__main__":
    main()
