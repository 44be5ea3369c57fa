"""The fast LSTM and GRU kernels (device/cpu/kernels/recurrent.py, _recurrent.py) against the ONNX reference
evaluator, with the native kernels switched off (with them, the cpu device's native recurrence takes these nodes:
tests/device/cpu/test_native_recurrent.py)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.device.cpu import native

T, B, N_IN, H = 7, 3, 5, 4
# Every output is a product of gates in [0, 1] and tanh values in [-1, 1]; one step's pre-activations are dot
# products of N_IN + H + 2 terms of magnitude <= |w| * |x| (float32: relative error <= (N_IN + H + 2) * 2^-23 each),
# tanh and the gate products add a few ulp; the recurrence is contracting (gates < 1), so the error of T steps
# stays below T times one step's. The weights and inputs are standard normal (|w x| < 25 here).
TOL = T * (N_IN + H + 8) * 25 * 2.0 ** -23


def _model(op: str, direction: str, layout: int, linear: int, lens: bool, states: bool, clip: float | None = None):
    rng = np.random.default_rng(7)
    gates = 4 if op == "LSTM" else 3
    d = 2 if direction == "bidirectional" else 1
    inits = [numpy_helper.from_array(rng.standard_normal((d, gates * H, N_IN)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal((d, gates * H, H)).astype(np.float32), "R"),
             numpy_helper.from_array(rng.standard_normal((d, 2 * gates * H)).astype(np.float32), "B")]
    xs, ss = ((B, T, N_IN), (B, d, H)) if layout else ((T, B, N_IN), (d, B, H))
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, xs)]
    feeds = {"X": rng.standard_normal(xs).astype(np.float32)}
    names = ["X", "W", "R", "B", "L" if lens else ""]
    if lens:
        inits.append(numpy_helper.from_array(np.full(B, T, np.int32), "L"))
    if states:
        for s in ("h0", "c0") if op == "LSTM" else ("h0",):
            names.append(s)
            graph_inputs.append(helper.make_tensor_value_info(s, TensorProto.FLOAT, ss))
            feeds[s] = rng.standard_normal(ss).astype(np.float32)
    outs = ["Y", "Yh"] + (["Yc"] if op == "LSTM" else [])
    attrs = {"hidden_size": H, "direction": direction, "layout": layout}
    if op == "GRU":
        attrs["linear_before_reset"] = linear
    if clip is not None:
        attrs["clip"] = clip
    node = helper.make_node(op, names, outs, **attrs)
    graph = helper.make_graph([node], "rnn", graph_inputs,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), feeds


@pytest.fixture(autouse=True)
def numpy_only(monkeypatch):
    """The numpy kernels, as an install without a C compiler runs them."""
    monkeypatch.setattr(native, "available", lambda: False)


CASES = [(op, direction, layout, linear, lens, states)
         for op in ("LSTM", "GRU") for direction in ("forward", "reverse", "bidirectional") for layout in (0, 1)
         for linear in ((0, 1) if op == "GRU" else (0,)) for lens, states in ((False, False), (True, True))]


@pytest.mark.parametrize("op,direction,layout,linear,lens,states", CASES)
def test_fast_recurrence_matches_the_reference(op, direction, layout, linear, lens, states):
    model, feeds = _model(op, direction, layout, linear, lens, states)
    want = ReferenceEvaluator(model).run(None, feeds)
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run(feeds)
        assert s.subgraphs[0].stats["kernels"][s.subgraphs[0].nodes[0].name] == "fast"
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=0, atol=TOL)


def test_a_clipped_lstm_keeps_the_reference_kernel():
    model, feeds = _model("LSTM", "forward", 0, 0, False, False, clip=0.5)
    with nnhal.Session(model, devices=["cpu"]) as s:
        s.run(feeds)
        assert s.subgraphs[0].stats["kernels"][s.subgraphs[0].nodes[0].name] == "reference"
