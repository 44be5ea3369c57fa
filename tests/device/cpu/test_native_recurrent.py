"""The native LSTM / GRU / RNN (kernels.c Recurrent, device/cpu/kernels/recurrent.py) against oracles: nnhal's
reference kernels for every attribute combination (they implement every attribute, in both layouts), onnxruntime
for layout 0 (it implements activations, clip, input_forget and sequence_lens; not layout 1), the ONNX reference
evaluator where it applies (default activations, no clip, no input_forget, no sequence_lens); and the numpy
kernels that run when the native module is absent. Tolerances: conformance/tolerance.py's kit policy for the op.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.conformance import tolerance
from nnhal.device.cpu import native

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.status().reason}")

T, N_IN = 6, 5
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
STATES = {"LSTM": ("h0", "c0"), "GRU": ("h0",), "RNN": ("h0",)}


def _model(op: str, direction: str = "forward", layout: int = 0, batch: int = 3, hidden: int = 4, lens=None,
           states: bool = False, peep: bool = False, outputs: tuple[str, ...] | None = None, seed: int = 7,
           steps: int = T, inputs: int = N_IN, **attrs):
    """One recurrent node with constant W, R, B (P, sequence_lens) and X (initial states) as graph inputs."""
    rng = np.random.default_rng(seed)
    g, d = GATES[op], 2 if direction == "bidirectional" else 1
    # weights of a trained layer's size (|w| ~ 0.4): pre-activations of a few units
    inits = [numpy_helper.from_array((0.4 * rng.standard_normal((d, g * hidden, inputs))).astype(np.float32), "W"),
             numpy_helper.from_array((0.4 * rng.standard_normal((d, g * hidden, hidden))).astype(np.float32), "R"),
             numpy_helper.from_array((0.4 * rng.standard_normal((d, 2 * g * hidden))).astype(np.float32), "B")]
    xs, ss = ((batch, steps, inputs), (batch, d, hidden)) if layout else ((steps, batch, inputs), (d, batch, hidden))
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, xs)]
    feeds = {"X": rng.standard_normal(xs).astype(np.float32)}
    names = ["X", "W", "R", "B", "" if lens is None else "L"]
    if lens is not None:
        inits.append(numpy_helper.from_array(np.asarray(lens, np.int32), "L"))
    for s in STATES[op]:
        names.append(s if states else "")
        if states:
            graph_inputs.append(helper.make_tensor_value_info(s, TensorProto.FLOAT, ss))
            feeds[s] = rng.standard_normal(ss).astype(np.float32)
    if peep:
        names.append("P")
        inits.append(numpy_helper.from_array((0.4 * rng.standard_normal((d, 3 * hidden))).astype(np.float32), "P"))
    while names and not names[-1]:
        names.pop()
    outs = list(outputs or ["Y", "Yh"] + (["Yc"] if op == "LSTM" else []))
    node = helper.make_node(op, names, outs, hidden_size=hidden, direction=direction, layout=layout, **attrs)
    graph = helper.make_graph([node], "rnn", graph_inputs,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs if o], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8), feeds


def _run(model, feeds) -> tuple[list[np.ndarray], str]:
    with nnhal.Session(model, devices=["cpu"]) as s:
        got = s.run(feeds)
        return got, s.subgraphs[0].stats["kernels"][s.subgraphs[0].nodes[0].name]


def _reference(model, feeds, monkeypatch) -> list[np.ndarray]:
    with monkeypatch.context() as m:
        m.setenv("NNHAL_CPU_REFERENCE", "1")
        got, kernel = _run(model, feeds)
    assert kernel == "reference"
    return got


def _check(got: list[np.ndarray], want: list[np.ndarray], op: str) -> None:
    tol = tolerance.kit_policy("fp32", [op])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        why = tolerance.compare(np.asarray(g), np.asarray(w, np.float32), tol)
        assert why is None, why


CELLS = [("LSTM", {}), ("GRU", {"linear_before_reset": 0}), ("GRU", {"linear_before_reset": 1}), ("RNN", {})]
GRID = [(op, attrs, direction, layout, batch, masked)
        for op, attrs in CELLS for direction in ("forward", "reverse", "bidirectional") for layout in (0, 1)
        for batch in (1, 5) for masked in (False, True)]


@pytest.mark.parametrize("op,attrs,direction,layout,batch,masked", GRID)
def test_every_cell_direction_layout_and_batch_matches_the_reference_kernel(op, attrs, direction, layout, batch,
                                                                             masked, monkeypatch):
    # masked: sequence lengths from 0 to T across the batch, and initial states
    lens = [(T - i) % (T + 1) for i in range(batch)] if masked else None
    model, feeds = _model(op, direction, layout, batch, lens=lens, states=masked, **attrs)
    got, kernel = _run(model, feeds)
    assert kernel == "native"
    _check(got, _reference(model, feeds, monkeypatch), op)
    if not masked:
        _check(got, ReferenceEvaluator(model).run(None, feeds), op)


ATTRIBUTES = [
    ("LSTM", {"peep": True}),
    ("LSTM", {"peep": True, "input_forget": 1}),
    ("LSTM", {"clip": 0.7}),
    ("LSTM", {"activations": ["HardSigmoid", "Softsign", "Relu"], "activation_alpha": [0.3], "activation_beta": [0.4]}),
    ("LSTM", {"activations": ["Sigmoid", "ScaledTanh", "Tanh"], "activation_alpha": [1.5], "activation_beta": [0.7]}),
    ("GRU", {"clip": 0.5, "linear_before_reset": 1}),
    ("GRU", {"activations": ["HardSigmoid", "Elu"], "activation_alpha": [0.25, 0.8], "activation_beta": [0.45]}),
    ("GRU", {"activations": ["Sigmoid", "Softplus"]}),
    ("RNN", {"activations": ["Relu"]}),
    ("RNN", {"activations": ["LeakyRelu"], "activation_alpha": [0.2]}),
    ("RNN", {"activations": ["ThresholdedRelu"], "activation_alpha": [0.3]}),
    ("RNN", {"activations": ["Affine"], "activation_alpha": [0.5], "activation_beta": [0.1]}),
    ("RNN", {"clip": 0.4}),
]


@pytest.mark.parametrize("op,attrs", ATTRIBUTES)
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_attributes_match_onnxruntime_and_the_reference_kernel(op, attrs, direction, monkeypatch):
    ort = pytest.importorskip("onnxruntime")
    attrs = dict(attrs)
    peep = attrs.pop("peep", False)
    if direction == "bidirectional" and "activations" in attrs:
        # a different list per direction: the second direction takes the defaults
        attrs["activations"] = attrs["activations"] + {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"],
                                                       "RNN": ["Tanh"]}[op]
    # NOTE: lengths of at least 1: for a length-0 entry onnxruntime's final states are zeros where nnhal's (and the
    # ONNX reference's masking) keep the initial states; the grid above covers length 0 against the reference kernel
    for layout in (0, 1):
        model, feeds = _model(op, direction, layout, batch=3, lens=[T, 2, 1], states=True, peep=peep, **attrs)
        got, kernel = _run(model, feeds)
        assert kernel == "native"
        _check(got, _reference(model, feeds, monkeypatch), op)
        if layout == 0:
            session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            _check(got, session.run(None, feeds), op)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("hidden", [19, 24])
def test_hidden_sizes_off_the_vector_width(op, hidden, monkeypatch):
    # 19: gate rows of 76 / 57 / 19 (the GEMV's 64-wide block, 8-wide vectors and single columns); 24 at batch 6:
    # the BLAS product of larger batches
    for batch in (2, 6):
        model, feeds = _model(op, "bidirectional", batch=batch, hidden=hidden, states=True)
        got, kernel = _run(model, feeds)
        assert kernel == "native"
        _check(got, _reference(model, feeds, monkeypatch), op)


def test_only_the_wanted_outputs():
    model, feeds = _model("LSTM", "bidirectional", outputs=("", "Yh"), lens=[T, 3, 1], states=True)
    full, _ = _run(*_model("LSTM", "bidirectional", lens=[T, 3, 1], states=True))
    got, kernel = _run(model, feeds)
    assert kernel == "native"
    np.testing.assert_array_equal(got[0], full[1])


def test_layout_one_is_the_transpose_of_layout_zero():
    # the same numbers in the other layout: bit for bit (the same products in the same order)
    zero, _ = _run(*_model("GRU", "bidirectional", 0, batch=3, lens=[T, 4, 2], states=True, linear_before_reset=1))
    model, feeds = _model("GRU", "bidirectional", 1, batch=3, lens=[T, 4, 2], states=True, linear_before_reset=1)
    feeds_zero = _model("GRU", "bidirectional", 0, batch=3, lens=[T, 4, 2], states=True, linear_before_reset=1)[1]
    feeds = {"X": feeds_zero["X"].transpose(1, 0, 2).copy(), "h0": feeds_zero["h0"].transpose(1, 0, 2).copy()}
    one, _ = _run(model, feeds)
    np.testing.assert_array_equal(one[0], zero[0].transpose(2, 0, 1, 3))
    np.testing.assert_array_equal(one[1], zero[1].transpose(1, 0, 2))


@pytest.mark.parametrize("pool", ["0", "1"])
@pytest.mark.parametrize("op,attrs", CELLS)
def test_projection_in_c_and_by_numpy(op, attrs, pool, monkeypatch):
    # NNHAL_CPU_POOL=1: the layer projects X W^T itself, split over the pool; =0: the layer projects itself too (a
    # small layer's short sequence on its blocked kernels, Recurrent.projects), else numpy's GEMM hands it in
    monkeypatch.setenv("NNHAL_CPU_POOL", pool)
    for direction, layout in (("forward", 1), ("bidirectional", 0)):
        model, feeds = _model(op, direction, layout, batch=5, hidden=19, lens=[T, 3, 0, 1, T], states=True, **attrs)
        with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
            got = s.run(feeds)
            assert s.subgraphs[0].stats["kernels"][s.subgraphs[0].nodes[0].name] == "native"
        _check(got, _reference(model, feeds, monkeypatch), op)


@pytest.mark.parametrize("pool", ["0", "1"])
@pytest.mark.parametrize("hidden", [19, 64])
@pytest.mark.parametrize("op,attrs", CELLS)
def test_one_step_at_batch_one_projects_its_row_by_the_packed_gemv(op, attrs, hidden, pool, monkeypatch):
    # a control-flow body's step: one row of X, projected in C over W^T packed at prepare (nn_rnn_row.h); hidden
    # 19 leaves a part block of the GEMV, 64 fills whole ones; bidirectional: each direction's columns
    monkeypatch.setenv("NNHAL_CPU_POOL", pool)
    for direction in ("forward", "bidirectional"):
        model, feeds = _model(op, direction, batch=1, hidden=hidden, states=True, steps=1, **attrs)
        with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
            got = s.run(feeds)
            assert s.subgraphs[0].stats["kernels"][s.subgraphs[0].nodes[0].name] == "native"
        _check(got, _reference(model, feeds, monkeypatch), op)


@pytest.mark.parametrize("threads", [1, 2])
def test_bidirectional_on_the_pool_matches_one_thread(threads):
    model, feeds = _model("LSTM", "bidirectional", batch=2, hidden=32, lens=[T, 3], states=True)
    with nnhal.Session(model, devices=["cpu"], num_thread=threads) as s:
        got = s.run(feeds)
    want, _ = _run(model, feeds)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_without_the_native_module_the_numpy_kernels_run(op, monkeypatch):
    model, feeds = _model(op, "bidirectional", lens=[T, 2, 0], states=True)
    native_out, _ = _run(model, feeds)
    with monkeypatch.context() as m:
        m.setattr(native, "available", lambda: False)
        got, kernel = _run(model, feeds)
    assert kernel in ("fast", "reference") and kernel != "native"
    _check(got, native_out, op)


def test_weights_fed_as_graph_inputs_are_packed_at_each_run():
    model, feeds = _model("LSTM")
    w = next(i for i in model.graph.initializer if i.name == "W")
    model.graph.initializer.remove(w)
    model.graph.input.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, list(w.dims)))
    feeds["W"] = numpy_helper.to_array(w)
    got, kernel = _run(model, feeds)
    assert kernel == "native"
    _check(got, ReferenceEvaluator(model).run(None, feeds), "LSTM")


def test_float16_inputs_are_widened_and_the_outputs_narrowed(monkeypatch):
    model, feeds = _model("GRU", "bidirectional", lens=[T, 3, 1], states=True)
    with nnhal.Session(model, devices=["cpu"], precision="fp16") as s:
        got = s.run(feeds)
    want = _reference(model, feeds, monkeypatch)
    for g, w in zip(got, want):
        why = tolerance.compare(np.asarray(g, np.float32), w, tolerance.Tolerance(5e-3, 5e-3))
        assert why is None, why


def _layer(hidden: int, inputs: int, directions: int = 1, project: int = 0):
    """A bare native LSTM layer of these sizes (zero weights): for its projection choice only."""
    rows = directions * 4 * hidden
    return native.Recurrent("lstm", (directions, 0, inputs, hidden, 0, 0, 0), np.zeros((rows, inputs), np.float32),
                            np.zeros(rows, np.float32), np.zeros((directions, hidden, 4 * hidden), np.float32), None,
                            None, ((0, 0.0, 0.0), (1, 0.0, 0.0), (1, 0.0, 0.0)) * directions, None, project)


def test_small_layers_project_short_sequences_themselves():
    # W^T in panels (at most 2^21 floats, each direction's columns padded to 16) and at most 2^26 multiply-adds:
    # the blocked kernels, no BLAS
    assert _layer(64, 64).projects(1) and _layer(64, 64).projects(100)
    assert _layer(64, 128, 2).projects(64)
    assert _layer(128, 256, 2).projects(64)           # a tagger's second layer: 64 * 1024 * 256 multiply-adds
    assert _layer(256, 512, 2).projects(64)           # 2048 * 512 floats of W^T: 4 MiB in panels
    assert not _layer(256, 512, 2).projects(65)       # 65 * 2048 * 512 > 2^26 multiply-adds: the BLAS's GEMM
    assert not _layer(64, 64).projects(5000)
    assert not _layer(64, 4100, 2).projects(1)        # W^T of 512 * 4100 floats is not packed
    with pytest.raises(ValueError, match="Recurrent.projects"):
        _layer(8, 8).projects(-1)


def test_the_project_argument_forces_either_path():
    assert not _layer(64, 64, 2, project=1).projects(2)           # NN_RNN_BLAS: never the blocked kernels
    assert _layer(256, 512, 2, project=2).projects(10_000)        # NN_RNN_BLOCKED: any rows once packed
    assert not _layer(64, 4100, 2, project=2).projects(1)         # ... but not without the panels
    with pytest.raises(ValueError, match="project"):
        _layer(8, 8, project=3)


def test_an_unknown_projection_mode_reads_as_auto(monkeypatch):
    monkeypatch.setenv("NNHAL_RNN_PROJECT", "fast")
    model, feeds = _model("LSTM", "bidirectional", batch=1)
    got, kernel = _run(model, feeds)
    assert kernel == "native"
    _check(got, _reference(model, feeds, monkeypatch), "LSTM")


@pytest.mark.parametrize("pool", ["0", "1"])
@pytest.mark.parametrize("steps", [1, 7, 33])
@pytest.mark.parametrize("op,attrs", [("LSTM", {}), ("GRU", {"linear_before_reset": 1}),
                                      ("GRU", {"linear_before_reset": 0})])
def test_short_sequences_projected_on_the_blocked_kernels_match_onnxruntime(op, attrs, steps, pool, monkeypatch):
    # the projection of every step on the recurrence's kernels (four rows at a time, then single rows: 1, 7 and 33
    # rows leave each remainder), pool on (parts) and off (no numpy GEMM handed in); hidden 19 leaves part blocks
    # of 16 and 8 columns, 64 fills them; batch 3 with sequence lengths, initial states given or absent
    ort = pytest.importorskip("onnxruntime")
    monkeypatch.setenv("NNHAL_CPU_POOL", pool)
    for direction, batch, hidden, states in (("forward", 1, 64, False), ("bidirectional", 1, 19, True),
                                             ("reverse", 3, 19, True), ("bidirectional", 3, 64, False)):
        lens = [steps, max(1, steps - 2), 1][:batch] if batch > 1 else None
        model, feeds = _model(op, direction, batch=batch, hidden=hidden, lens=lens, states=states, steps=steps,
                              **attrs)
        with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
            got = s.run(feeds)
            assert s.subgraphs[0].stats["kernels"][s.subgraphs[0].nodes[0].name] == "native"
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        _check(got, session.run(None, feeds), op)
        _check(got, _reference(model, feeds, monkeypatch), op)


@pytest.mark.parametrize("pool", ["0", "1"])
@pytest.mark.parametrize("inputs,steps", [(4100, 3), (600, 220)])
def test_large_projections_still_take_the_blas(inputs, steps, pool, monkeypatch):
    # hidden 64, both directions: W^T (4100, 512) is not packed, and 220 * 512 * 600 multiply-adds pass 2^26: the
    # BLAS (pool on) or numpy's GEMM (pool off) projects
    monkeypatch.setenv("NNHAL_CPU_POOL", pool)
    model, feeds = _model("LSTM", "bidirectional", batch=1, hidden=64, states=True, inputs=inputs, steps=steps)
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = s.run(feeds)
        assert s.subgraphs[0].stats["kernels"][s.subgraphs[0].nodes[0].name] == "native"
    _check(got, _reference(model, feeds, monkeypatch), "LSTM")


def _bilstm_stack(layers: int, hidden: int, steps: int, batch: int, states: bool, inputs: int = 40, seed: int = 3):
    """A tagger's recurrent stack as torch exports it: bidirectional LSTMs, each Y (T, 2, B, H) brought to the
    next layer's (T, B, 2H) by Transpose and Reshape; initial states as graph inputs when ``states``."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], [numpy_helper.from_array(np.asarray([0, 0, -1], np.int64), "shape")]
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, (steps, batch, inputs))]
    feeds = {"X": rng.standard_normal((steps, batch, inputs)).astype(np.float32)}
    x, width = "X", inputs
    scale = 1.0 / np.sqrt(hidden)          # torch's init range: gates of a few units, none saturated throughout
    for k in range(layers):
        w = rng.uniform(-scale, scale, (2, 4 * hidden, width)).astype(np.float32)
        r = rng.uniform(-scale, scale, (2, 4 * hidden, hidden)).astype(np.float32)
        b = rng.uniform(-scale, scale, (2, 8 * hidden)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"W{k}"), numpy_helper.from_array(r, f"R{k}"),
                  numpy_helper.from_array(b, f"B{k}")]
        names = [x, f"W{k}", f"R{k}", f"B{k}"]
        if states:
            names += ["", f"h{k}", f"c{k}"]
            for s in (f"h{k}", f"c{k}"):
                graph_inputs.append(helper.make_tensor_value_info(s, TensorProto.FLOAT, (2, batch, hidden)))
                feeds[s] = rng.standard_normal((2, batch, hidden)).astype(np.float32)
        nodes += [helper.make_node("LSTM", names, [f"Y{k}", f"Yh{k}", f"Yc{k}"], hidden_size=hidden,
                                   direction="bidirectional"),
                  helper.make_node("Transpose", [f"Y{k}"], [f"T{k}"], perm=[0, 2, 1, 3]),
                  helper.make_node("Reshape", [f"T{k}", "shape"], [f"X{k + 1}"])]
        x, width = f"X{k + 1}", 2 * hidden
    outs = [x, f"Yh{layers - 1}", f"Yc{layers - 1}"]
    graph = helper.make_graph(nodes, "stack", graph_inputs,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), feeds


@pytest.mark.parametrize("mode", ["auto", "blas", "blocked"])
@pytest.mark.parametrize("layers,hidden", [(1, 64), (2, 64), (2, 128), (1, 256), (2, 256)])
def test_bidirectional_stacks_match_onnxruntime_and_the_reference_kernel(layers, hidden, mode, monkeypatch):
    # the projection of each layer forced onto either path (blas, blocked) or left to the size rule, both
    # directions on the pool (two threads) and on one: sequences of 1, an odd 7 and a long 65 steps (four-row
    # blocks and their remainders), batch 1 and 3, initial states given or zero; 2H = 128 ... 512 inputs to the
    # second layer (panels of 16 columns over 256 ... 1024 gate columns per direction)
    ort = pytest.importorskip("onnxruntime")
    monkeypatch.setenv("NNHAL_RNN_PROJECT", mode)
    for steps, batch, states, threads in ((1, 1, False, 2), (7, 3, True, 1), (65, 1, True, 2), (65, 3, False, 2)):
        model, feeds = _bilstm_stack(layers, hidden, steps, batch, states)
        with nnhal.Session(model, devices=["cpu"], num_thread=threads) as s:
            got = s.run(feeds)
            kernels = s.subgraphs[0].stats["kernels"]
            assert [kernels[n.name] for n in s.subgraphs[0].nodes if n.op_type == "LSTM"] == ["native"] * layers
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        _check(got, session.run(None, feeds), "LSTM")
        _check(got, _reference(model, feeds, monkeypatch), "LSTM")
