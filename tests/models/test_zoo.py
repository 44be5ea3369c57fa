"""The nine light model-zoo graphs of the onnx wheel, end to end on the CPU device.

With their shipped constant weights they must give the shipped outputs; with
seeded random weights (the benchmark default) they must match onnxruntime.
Tolerance: rtol 1e-3, atol 1e-5.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import nnhal
from nnhal.zoo import input_for, reference_output, resolve, zoo_names, zoo_path

MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
          "vgg19", "zfnet512"]


def test_the_wheel_ships_the_nine_models():
    assert zoo_names() == sorted(MODELS)


def _dummy_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The inputs the onnx backend runner made the shipped outputs with: arange(n) / n."""
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        feeds[vi.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return feeds


@pytest.mark.parametrize("name", MODELS)
def test_shipped_weights_give_the_shipped_output(name):
    model = onnx.load(str(zoo_path(name)))
    with nnhal.Session(model) as s:
        out = s.run(_dummy_inputs(model))[0]
    np.testing.assert_allclose(out, reference_output(name), rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("name", MODELS)
def test_random_weights_match_onnxruntime(name):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")
    model = resolve(f"zoo:{name}?weights=random&seed=1")
    feeds = input_for(model, seed=2)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    with nnhal.Session(model) as s:
        got = s.run(feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-5)
    # random weights must make the output informative, not a constant
    assert np.std(want[0]) > 0.01 * np.mean(np.abs(want[0]))
