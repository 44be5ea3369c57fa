"""Gather by indices known only at run (device/cpu/kernels/gather.py GatherIndices) against onnx.reference, bit
for bit (Gather only moves elements), on both plan paths: embedding lookups, other axes, negative indices, and
an out-of-range index as a typed error naming the node."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.device.cpu.kernels import select
from nnhal.device.cpu.kernels.gather import FEW_INDICES, GatherIndices
from nnhal.errors import NnhalError
from nnhal.operator.base import Info
from nnhal.serializer.onnx_import import load_onnx

RNG = np.random.default_rng(29)


def _model(data: np.ndarray, idx_shape, idx_dtype, axis: int) -> onnx.ModelProto:
    node = helper.make_node("Gather", ["data", "i"], ["y"], axis=axis, name="lookup")
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("i", helper.np_dtype_to_tensor_dtype(np.dtype(idx_dtype)),
                                                             idx_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(data, "data")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _sessions(model, monkeypatch):
    for check in ("1", "0"):
        monkeypatch.setenv("NNHAL_CHECK", check)
        with nnhal.Session(model, devices=["cpu"], num_thread=1) as s:
            yield s


@pytest.mark.parametrize("axis, data_shape, idx_shape", [
    (0, (256, 32), (1, 64)),        # an embedding lookup of byte ids (FEW_INDICES: numpy's checks)
    (0, (256, 32), (2, 100)),       # more than FEW_INDICES: one min and one max, then mode="clip"
    (0, (2048, 16), (1, 1)),        # a decoder step's one token
    (0, (50, 3, 4), (7,)),
    (1, (5, 9, 4), (2, 3)),
    (-1, (4, 6), (5,)),
])
@pytest.mark.parametrize("idx_dtype", [np.int64, np.int32])
def test_against_the_reference(axis, data_shape, idx_shape, idx_dtype, monkeypatch):
    data = RNG.standard_normal(data_shape).astype(np.float32)
    dim = data_shape[axis]
    idx = RNG.integers(-dim, dim, idx_shape).astype(idx_dtype)
    model = _model(data, list(idx_shape), idx_dtype, axis)
    wrapped = np.where(idx < 0, idx + dim, idx).astype(idx_dtype)      # no negative index: nothing to wrap
    for s in _sessions(model, monkeypatch):
        for i in (idx, wrapped):
            np.testing.assert_array_equal(s.run({"i": i})[0], ReferenceEvaluator(model).run(None, {"i": i})[0])


@pytest.mark.parametrize("count", [3, FEW_INDICES + 1], ids=["few", "many"])
@pytest.mark.parametrize("bad", [10, -11])
def test_an_index_out_of_range_names_the_node(bad, count, monkeypatch):
    model = _model(RNG.standard_normal((10, 4)).astype(np.float32), [1, count], np.int64, 0)
    idx = np.ones((1, count), np.int64)
    idx[0, count // 2] = bad
    for s in _sessions(model, monkeypatch):
        with pytest.raises(NnhalError, match=rf"'lookup'.*Gather.*index {bad} is out of range"):
            s.run({"i": idx})


def test_chosen_for_run_indices_only():
    model = _model(np.zeros((10, 4), np.float32), [1, 3], np.int64, 0)
    node = load_onnx(model).nodes[0]
    data, out = Info(np.dtype(np.float32), (10, 4)), [Info(np.dtype(np.float32), (1, 3, 4))]
    assert type(select(node, [data, Info(np.dtype(np.int64), (1, 3))], out)) is GatherIndices
    constant = Info(np.dtype(np.int64), (1, 3), value=np.array([[1, 2, 3]]))
    assert type(select(node, [data, constant], out)) is not GatherIndices
