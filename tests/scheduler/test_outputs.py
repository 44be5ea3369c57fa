"""The core checks every device output against inference and owns what it hands the user (scheduler/outputs.py)."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from onnx import TensorProto, helper

import nnhal
from nnhal.device.manager import register_device, unregister_device
from nnhal.errors import DeviceError
from tests.testing import broken


def _model(shape=(2, 3)):
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"), helper.make_node("Add", ["a", "x"], ["y"], name="s")]
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape)) for n in ("x", "y")]
    return helper.make_model(helper.make_graph(nodes, "g", info[:1], info[1:]),
                             opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def device():
    names = []

    def make(name, run):
        record = broken.good(name)
        register_device(dataclasses.replace(record, interface=dataclasses.replace(record.interface, run=run)))
        names.append(name)
        return name

    yield make
    for name in names:
        unregister_device(name)


def _returning(change):
    def run(dev, sg):
        out = broken.compute(sg)
        for name in sg.outputs:
            sg.values[name] = change(out[name])
    return run


X = np.array([[-1, 0, 1], [2, -3, 4]], np.float32)


@pytest.mark.parametrize("change, got", [(lambda v: v.reshape(-1), "float32 [6]"),
                                         (lambda v: v.astype(np.float64), "float64 [2, 3]")])
def test_a_misshapen_output_falls_back_naming_device_subgraph_tensor_and_both_formats(device, change, got):
    name = device("outshape", _returning(change))
    with nnhal.Session(_model(), devices=[name]) as s:
        y = s.run({"x": X})[0]
        fallbacks = s.fallbacks
    np.testing.assert_array_equal(y, np.maximum(X, 0) + X)
    assert len(fallbacks) == 1 and fallbacks[0].stage == "run" and fallbacks[0].device == name
    assert f"on device '{name}': output 'y' is {got}, inference expected float32 [2, 3]" in fallbacks[0].error
    with nnhal.Session(_model(), devices=[name], strict=True) as s, \
            pytest.raises(DeviceError, match=re.escape(f"subgraph #0 on device '{name}': output 'y' is {got}")):
        s.run({"x": X})


def test_a_numpy_scalar_is_taken_as_a_0d_array(device):
    name = device("outscalar", _returning(lambda v: v[()] if v.ndim == 0 else v))
    with nnhal.Session(_model(()), devices=[name], strict=True) as s:
        y = s.run({"x": np.array(-2, np.float32)})[0]
    assert isinstance(y, np.ndarray) and y.shape == () and float(y) == -2


def test_a_constant_graph_output_is_the_users_own_copy():
    from onnx import numpy_helper

    k = numpy_helper.from_array(np.ones(3, np.float32), "k")
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("y", "k")], [k])
    with nnhal.Session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])) as s:
        s.run({"x": np.zeros(3, np.float32)})[1][:] = 7
        np.testing.assert_array_equal(s.run({"x": np.zeros(3, np.float32)})[1], 1)
