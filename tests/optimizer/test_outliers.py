"""The transformer int8 pieces on their own: the per-token kernel, the plan's per-node choices, the
safetensors reader and the WordPiece tokenizer."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import nnhal
from nnhal.errors import ModelError, ShapeError
from nnhal.graph.node import Node
from nnhal.operator.base import Info
from nnhal.operator.table import get_prototype
from nnhal.optimizer.infer import infer_graph
from nnhal.optimizer.outliers import plan_int8
from nnhal.serializer.onnx_import import load_onnx


def _kernel(attrs, ins):
    from nnhal.hostkernels.nn_dynamic_quantize_gemm import DynamicQuantizeGemmKernel
    from nnhal.operator.table import get_prototype

    node = Node("g", "DynamicQuantizeGemm", ["x", "w", "s", "b", "wf"][:len(ins)], ["y"], dict(attrs), "ai.nnhal", 1, 1)
    get_prototype("ai.nnhal", "DynamicQuantizeGemm").normalize(node)
    infos = [Info(np.asarray(v).dtype, np.shape(v), None if i == 0 else np.asarray(v)) for i, v in enumerate(ins)]
    return node, DynamicQuantizeGemmKernel().prepare(node, infos, [Info(np.dtype(np.float32), None)])


@pytest.mark.parametrize("activation", ["int8", "uint8"])
def test_dynamic_gemm_quantizes_each_row_with_its_own_scale(activation):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((6, 40)) * np.array([1, 10, 100, 0.1, 1, 5])[:, None]).astype(np.float32)
    wq = rng.integers(-127, 128, (7, 40)).astype(np.int8)
    ws = rng.uniform(0.001, 0.01, 7).astype(np.float32)
    bias = rng.standard_normal(7).astype(np.float32)
    _, run = _kernel({"activation": activation}, [x, wq, ws, bias])
    y = run([x, wq, ws, bias], [None])[0]
    want = []
    for row in x.astype(np.float64):            # the definition, row by row
        if activation == "int8":
            s = np.abs(row).max() / 127
            q, z = np.rint(row / s), 0.0
        else:
            lo, hi = min(row.min(), 0), max(row.max(), 0)
            s = (hi - lo) / 255
            z = np.rint(-lo / s)
            q = np.clip(np.rint(row / s) + z, 0, 255)
        want.append(((q - z) @ wq.T.astype(np.float64)) * s * ws + bias)
    np.testing.assert_allclose(y, np.array(want), rtol=2e-6, atol=1e-5)
    # each row is close to the float product at its own scale, the 0.1-magnitude row included
    exact = x.astype(np.float64) @ (wq.astype(np.float64) * ws[:, None]).T + bias
    rel = np.linalg.norm(y - exact, axis=1) / np.linalg.norm(exact - bias, axis=1)
    assert rel.max() < 0.02


@pytest.mark.parametrize("activation", ["int8", "uint8"])
def test_dynamic_gemm_in_blocks_scales_each_block_and_beats_whole_rows(activation):
    from nnhal.optimizer.quantize import fake_quantize_rows, per_block_int8

    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    x[:, 5] *= 40                                   # one outlier channel, as a transformer's residual stream has
    w = rng.standard_normal((6, 64)).astype(np.float32)
    bias = rng.standard_normal(6).astype(np.float32)
    wq, ws = per_block_int8(w, 16)
    assert wq.shape == (6, 64) and ws.shape == (6, 4)
    _, run = _kernel({"activation": activation, "block": 16}, [x, wq, ws, bias])
    y = run([x, wq, ws, bias], [None])[0]
    deq = (wq.reshape(6, 4, 16).astype(np.float64) * ws[:, :, None]).reshape(6, 64)
    want = fake_quantize_rows(x, activation == "int8", 16).astype(np.float64) @ deq.T + bias
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-4)
    for k in range(4):                              # the definition: each block of a row has its own scale
        block = x[:, 16 * k:16 * (k + 1)].astype(np.float64)
        if activation == "int8":
            scale = np.abs(block).max(axis=1, keepdims=True) / 127
            np.testing.assert_allclose(fake_quantize_rows(x, True, 16)[:, 16 * k:16 * (k + 1)],
                                       np.rint(block / scale) * scale, rtol=1e-6, atol=1e-6)
    exact = x.astype(np.float64) @ w.T.astype(np.float64) + bias
    rows_q, rows_s = per_block_int8(w, 0)
    _, whole = _kernel({"activation": activation}, [x, rows_q, rows_s, bias])
    whole_err = np.linalg.norm(whole([x, rows_q, rows_s, bias], [None])[0] - exact)
    assert np.linalg.norm(y - exact) < 0.8 * whole_err        # the outlier coarsens only its own block
    node, _ = _kernel({"activation": activation, "block": 16}, [x, wq, ws, bias])
    proto = get_prototype("ai.nnhal", "DynamicQuantizeGemm")
    with pytest.raises(ShapeError, match="w_scale"):
        proto.infer(node, [Info(np.dtype(np.float32), (8, 64)), Info(np.dtype(np.int8), (6, 64)),
                           Info(np.dtype(np.float32), (6,)), None])
    node.attrs["block"] = 24
    with pytest.raises(ShapeError, match="divisor"):
        proto.infer(node, [Info(np.dtype(np.float32), (8, 64)), Info(np.dtype(np.int8), (6, 64)),
                           Info(np.dtype(np.float32), (6, 4)), None])


def test_dynamic_gemm_computes_float_columns_in_float():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 16)).astype(np.float32)
    w = rng.standard_normal((4, 16)).astype(np.float32)
    wq = np.clip(np.rint(w / 0.02), -127, 127).astype(np.int8)
    ws = np.full(4, 0.02, np.float32)
    bias = np.arange(4, dtype=np.float32)
    _, run = _kernel({"activation": "int8", "float_columns": [2]}, [x, wq, ws, bias, w[[2]]])
    y = run([x, wq, ws, bias, w[[2]]], [None])[0]
    np.testing.assert_allclose(y[:, 2], x @ w[2] + 2.0, rtol=1e-6)
    assert not np.allclose(y[:, 0], x @ w[0] + 0.0, rtol=1e-6)       # the others are quantized


def _bert_graph():
    from nnhal.models.bert import bert_inputs, build_bert

    model = build_bert(layers=1, hidden=32, heads=2, seq=8, vocab=50, seed=1)
    g = load_onnx(model)
    feeds = bert_inputs(2, 8, vocab=50)
    for name in g.inputs:
        g.tensors[name].shape = feeds[name].shape
    infer_graph(g)
    return model, g, feeds


def test_plan_keeps_norms_softmax_gelu_residuals_and_attention_in_float():
    _, g, _ = _bert_graph()
    plan = plan_int8(g, None)
    modes = {}
    for c in plan.choices:
        modes.setdefault(c.op_type, set()).add(c.mode)
    assert modes["LayerNormalization"] == modes["Softmax"] == modes["Erf"] == {"fp32"}
    assert modes["MatMul"] == {"fp32"}                     # Q.K^T and probs.V: two activations
    # the six token products per layer are dynamic; the pooler's Gemm (one row per sentence) stays static
    assert modes["Gemm"] == {"int8 dynamic", "int8 static"} and len(plan.dynamic) == 6
    residual = [c for c in plan.choices if c.op_type == "Add" and "LayerNormalization" in c.reason]
    assert len(residual) >= 2 and not plan.smoothing         # no per-channel statistics given: not smoothed


def test_outlier_output_needs_dynamic_and_a_static_device_declines_it():
    model, g, feeds = _bert_graph()
    ffn_out = [n for n in g.nodes if n.op_type == "Add" and any(
        p.op_type == "MatMul" and g.tensors[p.inputs[1]].shape == (128, 32)
        for p in g.nodes if p.outputs[0] in n.inputs)]
    assert ffn_out
    name = ffn_out[0].outputs[0]
    lo, hi = -np.ones(32), np.ones(32)
    lo[5], hi[5] = -100.0, 100.0                            # one outlier dimension
    plan = plan_int8(g, {name: (lo, hi)})
    (node,) = plan.required
    assert "outlier" in plan.required[node] and plan.dynamic[node] == (5,)
    table = nnhal.calibrate(model, [feeds], progress=False)
    table.channels[name] = (tuple(lo), tuple(hi))
    with nnhal.Session(model, devices=["vnpu", "cpu"], precision="uint8", calibration=table) as s:
        s.run(feeds)
        decision = s.placement[node]
    assert decision.device == "cpu" and "statically only" in decision.declined["vnpu"]


def test_smoothing_measured_on_rows_beats_the_noise_model_under_dynamic_blocks():
    """With rows of the activation at hand, alpha is chosen by the error of the products quantized as the
    CPU's dynamic Gemm does them (blocks of 8, MSE-clipped weights), not by the per-tensor noise model."""
    from nnhal.optimizer.outliers import MEASURED_ALPHAS, _best_alpha, _measured_alpha
    from nnhal.optimizer.quantize import BLOCK, fake_quantize_rows, per_block_int8

    rng = np.random.default_rng(2)
    x = rng.standard_normal((256, 64)).astype(np.float32)
    x[:, [3, 17, 40]] = x[:, [3, 17, 40]] * 30 + 20          # outlier channels with an offset (LayerNorm's beta)
    weights = [rng.standard_normal((48, 64)).astype(np.float32) * 0.1,
               rng.standard_normal((32, 64)).astype(np.float32) * 0.1]
    amax = np.abs(x).max(axis=0).astype(np.float64)
    wmax = np.abs(np.concatenate(weights)).max(axis=0).astype(np.float64)

    def error(s):
        total = 0.0
        for w in weights:
            wq, ws = per_block_int8(w if s is None else (w * s[None, :]).astype(np.float32), BLOCK)
            deq = (wq.reshape(wq.shape[0], -1, BLOCK) * ws[:, :, None]).reshape(wq.shape)
            xq = fake_quantize_rows(x if s is None else (x / s).astype(np.float32), False, BLOCK)
            ref = x.astype(np.float64) @ w.T
            total += float(np.sum((xq @ deq.T - ref) ** 2) / np.sum(ref ** 2))
        return total

    measured, s_measured = _measured_alpha(x, amax, wmax, weights)
    modelled, s_modelled = _best_alpha(amax, wmax, weights)
    assert measured in MEASURED_ALPHAS and s_measured is not None and s_modelled is not None
    assert error(s_measured) < error(s_modelled) < 0.5 * error(None), (measured, modelled)
    flat = rng.standard_normal((256, 64)).astype(np.float32)   # no outliers: smoothing does not pay, none
    assert _measured_alpha(flat, np.abs(flat).max(axis=0).astype(np.float64), wmax, weights) == (0.0, None)


def test_plan_measures_alpha_where_rows_are_given():
    from nnhal.device.manager import graph_compiler
    from nnhal.optimizer.outliers import _measured_alpha, token_activations, token_statistics

    _, g, feeds = _bert_graph()
    names = token_activations(g)
    values = dict(feeds)
    graph_compiler()(g, g.nodes, list(g.inputs), names).run(values)
    channels, samples = token_statistics(g, feeds, names)
    assert set(samples) == set(names) and all(samples[n].shape == (16, values[n].shape[-1]) for n in names)
    for n in names:          # the extremes are over every row, the sample is rows of the tensor
        rows = values[n].reshape(-1, values[n].shape[-1])
        np.testing.assert_array_equal(channels[n][1], rows.max(axis=0))
        assert all(any(np.array_equal(r, q) for q in rows) for r in samples[n])
    modelled = plan_int8(g.copy(), channels)
    measured = plan_int8(g.copy(), channels, samples)
    assert modelled.smoothing.keys() != measured.smoothing.keys() or modelled.smoothing != measured.smoothing
    gemms = [n for n in g.nodes if n.op_type == "MatMul" and g.tensors[n.inputs[1]].is_constant
             and n.inputs[0] in samples]
    x = gemms[0].inputs[0]
    users = [g.tensors[n.inputs[1]].value.T for n in gemms if n.inputs[0] == x]
    amax = np.maximum(np.abs(channels[x][0]), np.abs(channels[x][1]))
    wmax = np.max(np.abs(np.concatenate(users)), axis=0)
    assert measured.smoothing.get(x, 0.0) == _measured_alpha(samples[x], amax, wmax, users)[0]
    dynamic = [c for c in measured.choices if c.mode == "int8 dynamic"]     # the report says how alpha was found
    assert len(dynamic) == 6 and all("measured on 16 rows" in c.reason for c in dynamic)
    assert not any("measured" in c.reason for c in modelled.choices)


def test_safetensors_reader(tmp_path):
    from nnhal.models.safetensors import read_safetensors

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1, -2], np.int64)
    header = {"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
              "b": {"dtype": "I64", "shape": [2], "data_offsets": [24, 40]}, "__metadata__": {"format": "pt"}}
    raw = json.dumps(header).encode()
    path = tmp_path / "m.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + a.tobytes() + b.tobytes())
    got = read_safetensors(path)
    np.testing.assert_array_equal(got["a"], a)
    np.testing.assert_array_equal(got["b"], b)
    header["a"]["data_offsets"] = [0, 20]
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + a.tobytes() + b.tobytes())
    with pytest.raises(ModelError, match="do not hold"):
        read_safetensors(path)


def test_wordpiece(tmp_path):
    from nnhal.models.wordpiece import WordPiece

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able", "hello", ",", "!", "cafe"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tok = WordPiece(tmp_path / "vocab.txt")
    assert tok.words("Hello, UNAFFABLE Café!") == ["hello", ",", "unaffable", "cafe", "!"]
    enc = tok.encode(["Hello, unaffable xyz!"], 10)
    assert enc["input_ids"][0].tolist() == [2, 7, 8, 4, 5, 6, 1, 9, 3, 0]
    assert enc["attention_mask"][0].tolist() == [1] * 9 + [0]
