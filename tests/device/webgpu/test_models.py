"""The zoo CNNs and a BERT encoder entirely on webgpu, against onnxruntime in fp32.

Relative error = max |got - want| / max |want| <= 1e-4 on the logits (a final Softmax of random-weight
logits saturates to one-hot and would hide errors, so the models are cut before it).
Every Conv, MatMul, Gemm, normalization and activation node must be placed on webgpu.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import nnhal
from nnhal.models.bert import bert_inputs, build_bert
from nnhal.zoo import input_for, resolve

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")

COMPUTE = {"Conv", "MatMul", "Gemm", "BatchNormalization", "LayerNormalization", "LRN", "Relu", "Erf", "Tanh",
           "Sigmoid", "Gelu", "Softmax"}


def _logits(model: onnx.ModelProto) -> onnx.ModelProto:
    last = model.graph.node[-1]
    if last.op_type == "Softmax":
        del model.graph.node[-1]
        del model.graph.output[:]
        model.graph.output.extend([onnx.helper.make_tensor_value_info(last.input[0], onnx.TensorProto.FLOAT, None)])
    return model


def _check(model: onnx.ModelProto, feeds: dict, gemm: str = "auto") -> None:
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    with nnhal.Session(model, devices=["webgpu", "cpu"], device_options={"webgpu": {"gemm": gemm}}, strict=True) as s:
        got = s.run(feeds)
        placement = s.placement
    elsewhere = [f"{d.node} ({d.op_type}): {d.declined}" for d in placement.values()
                 if d.op_type in COMPUTE and d.device != "webgpu"]
    assert not elsewhere, elsewhere
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert np.std(w) > 0, "the reference output is constant: the comparison would prove nothing"
        rel = float(np.max(np.abs(g - w)) / np.max(np.abs(w)))
        assert rel <= 1e-4, f"relative error {rel:.3g}"


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet", "inception_v1", "resnet50", "densenet121"])
def test_zoo_model_matches_onnxruntime(webgpu, name):
    model = _logits(resolve(f"zoo:{name}?weights=random&seed=1"))
    _check(model, input_for(model, seed=2))


@pytest.mark.parametrize("gemm", ["auto", "tiled"])
def test_bert_encoder_matches_onnxruntime(webgpu, gemm):
    model = build_bert(layers=2, hidden=64, heads=4, seq=None, vocab=500, seed=3)
    _check(model, bert_inputs(2, 16, vocab=500, seed=4), gemm)


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet"])
def test_the_workgroup_memory_gemm_matches_too(webgpu, name):
    """lavapipe picks the register-only GEMM; a GPU picks the tiled one, checked here through the option."""
    model = _logits(resolve(f"zoo:{name}?weights=random&seed=1"))
    feeds = input_for(model, seed=2)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    with nnhal.Session(model, devices=["webgpu"], device_options={"webgpu": {"gemm": "tiled"}}, strict=True) as s:
        got = s.run(feeds)[0]
        kernels = [k for sg in s.graph.execution.subgraphs for k in sg.stats["webgpu_kernels"]]
    assert any(k.startswith("Conv") for k in kernels)
    assert float(np.max(np.abs(got - want)) / np.max(np.abs(want))) <= 1e-4


RELAXED = 5 * 2.0 ** -10       # NNAPI's relaxed fp16 tolerance


# NOTE: not ShuffleNet: with its seeded random weights activations pass f16's 65504 (the cpu device's fp16
# gives nan too)
@pytest.mark.parametrize("name", ["squeezenet", "bert"])
def test_fp16_storage_is_within_the_relaxed_tolerance(webgpu, name):
    if "fp16" not in webgpu.describe().precisions:
        pytest.skip("the adapter has no shader-f16")
    if name == "bert":
        model = build_bert(layers=2, hidden=64, heads=4, seq=None, vocab=500, seed=3)
        feeds = bert_inputs(2, 16, vocab=500, seed=4)
    else:
        model = _logits(resolve(f"zoo:{name}?weights=random&seed=1"))
        feeds = input_for(model, seed=2)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    weights = {}
    for precision in ("fp32", "fp16"):
        with nnhal.Session(model, devices=["webgpu"], precision=precision, strict=True) as s:
            got = s.run(feeds)
            (sg,) = s.graph.execution.subgraphs
            assert sg.precision == precision
            weights[precision] = (sg.stats["webgpu_weight_bytes"], sg.stats["webgpu_scratch_bytes"])
    # really held as f16: weights and intermediates take half the bytes (up to word padding)
    assert weights["fp16"][0] <= weights["fp32"][0] // 2 + 2 * len(model.graph.initializer)
    assert weights["fp16"][1] <= weights["fp32"][1] // 2 + 64
    for g, w in zip(got, want):
        rel = float(np.max(np.abs(g - w)) / np.max(np.abs(w)))
        assert rel <= RELAXED, f"relative error {rel:.3g}"


def test_a_new_input_shape_prepares_again_on_the_gpu(webgpu):
    """BERT with a dynamic batch and sequence: each new shape releases the buffers and plans new ones."""
    model = build_bert(layers=2, hidden=64, heads=4, seq=None, vocab=500, seed=3)
    oracle = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with nnhal.Session(model, devices=["webgpu"], strict=True) as s:
        for batch, seq in [(2, 16), (1, 8), (2, 16)]:
            feeds = bert_inputs(batch, seq, vocab=500, seed=4)
            for g, w in zip(s.run(feeds), oracle.run(None, feeds)):
                assert g.shape == w.shape
                assert float(np.max(np.abs(g - w)) / np.max(np.abs(w))) <= 1e-4
