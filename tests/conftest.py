"""Shared fixtures: nnhal initialised once, small ONNX models built in code."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import nnhal


@pytest.fixture(scope="session", autouse=True)
def _init_nnhal():
    nnhal.init()
    yield
    nnhal.release()


def make_model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def vinfo(name: str, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


@pytest.fixture
def relu_add_model() -> onnx.ModelProto:
    """y = relu(x) + b, z = relu(y)"""
    b = onnx.numpy_helper.from_array(np.linspace(-1, 1, 4, dtype=np.float32), "b")
    return make_model(
        [helper.make_node("Relu", ["x"], ["r"], name="relu1"),
         helper.make_node("Add", ["r", "b"], ["y"], name="add1"),
         helper.make_node("Relu", ["y"], ["z"], name="relu2")],
        [vinfo("x", [2, 4])], [vinfo("z", [2, 4])], [b])


@pytest.fixture
def conversions_at_edges(monkeypatch):
    """The CPU layout pass as before the direct Conv's channels-first sides: its region edges convert with
    Transpose steps (for tests of those conversions, their folded casts, and the regions around them)."""
    from nnhal.device.cpu.kernels._conv_nhwc import ConvGemmNHWC

    monkeypatch.setattr(ConvGemmNHWC, "nchw_input", lambda self, node, ins, outs: None)
    monkeypatch.setattr(ConvGemmNHWC, "nchw_output", lambda self, node, ins, outs: None)
