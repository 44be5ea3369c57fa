"""Small models for the CLI tests (milliseconds to run), saved where a command can read them."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tests.conftest import make_model, vinfo


def conv_softmax() -> onnx.ModelProto:
    """x[1,3,8,8] -> Conv -> Relu -> GlobalAveragePool -> Flatten -> Softmax: the Conv part runs on vnpu,
    Softmax on the CPU (vnpu declines it), so a vnpu,cpu run has two devices and boundary conversions."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((6, 3, 3, 3)) * 0.3).astype(np.float32), "w")
    b = numpy_helper.from_array(np.zeros(6, np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["g"], name="pool"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Softmax", ["f"], ["y"], name="softmax")]
    return make_model(nodes, [vinfo("x", [1, 3, 8, 8])], [vinfo("y", [1, 6])], [w, b], opset=13)


def save(model: onnx.ModelProto, folder: Path, name: str = "model.onnx") -> str:
    path = folder / name
    onnx.save(model, str(path))
    return str(path)
