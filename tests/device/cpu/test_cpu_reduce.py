"""ReduceMean/Sum/Max/Min on the cpu device's fast kernel (device/cpu/kernels/reduce.py) against onnx.reference,
on both plan paths: middle, inner, outer and several axes, keepdims on and off, axes as an attribute (opset 17)
and as a constant input (opset 18). Max and Min pick elements (bit-equal); the sums are within the reduction
bound of any summation order (tolerance.reduction_bound), and bit-equal to the host reference kernel, whose
order the fast kernel keeps."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.conformance.tolerance import assert_within_bound, reduction_bound
from nnhal.device.cpu.kernels import select
from nnhal.device.cpu.kernels.reduce import ReduceMeanFast
from nnhal.operator.base import Info
from nnhal.serializer.onnx_import import load_onnx

RNG = np.random.default_rng(31)
OPS = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin")


def _model(op: str, shape, axes, keepdims: int, opset: int) -> onnx.ModelProto:
    as_input = op == "ReduceSum" or opset >= 18
    inputs, inits, attrs = ["x"], [], {"keepdims": keepdims}
    if axes is not None and as_input:
        inputs.append("axes")
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    elif axes is not None:
        attrs["axes"] = list(axes)
    node = helper.make_node(op, inputs, ["y"], name="reduce", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _run_both_paths(model, x, monkeypatch, fast: bool = True) -> list[np.ndarray]:
    """Outputs of both plan paths; ``fast``: the Reduce runs on the fast kernel (False: it became another op, a
    spatial mean's GlobalAveragePool, device/cpu/spatial_mean.py)."""
    got = []
    for check in ("1", "0"):
        monkeypatch.setenv("NNHAL_CHECK", check)
        with nnhal.Session(model, devices=["cpu"], num_thread=1) as s:
            got.append(s.run({"x": x})[0])
            kernels = [d.kernel for d in s.profile({"x": x}, runs=1).nodes if d.op.startswith("Reduce")]
            assert kernels == (["fast"] if fast else [])
    return got


@pytest.mark.parametrize("shape, axes", [
    ((1, 4, 32, 96), (1,)),          # SVTR's mean over the height rows
    ((2, 3, 5, 7), (2, 3)),          # a global average pool
    ((6, 33), (-1,)),
    ((5, 8, 3), (0,)),
    ((3, 4, 5, 6), (0, 2)),          # axes apart
    ((4, 9), None),                  # every axis
])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("opset", [17, 18])
def test_against_the_reference(op, shape, axes, keepdims, opset, monkeypatch):
    x = RNG.standard_normal(shape).astype(np.float32)
    model = _model(op, shape, axes, keepdims, opset)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    picked = tuple(range(len(shape))) if axes is None else tuple(a % len(shape) for a in axes)
    count = int(np.prod([shape[a] for a in picked]))
    spatial = op == "ReduceMean" and len(shape) == 4 and sorted(picked) == [2, 3]
    for got in _run_both_paths(model, x, monkeypatch, fast=not spatial):
        assert got.shape == expected.shape and got.dtype == np.float32
        if op in ("ReduceMax", "ReduceMin"):
            np.testing.assert_array_equal(got, expected)
        else:
            scale = 1.0 / count if op == "ReduceMean" else 1.0
            abs_sum = np.add.reduce(np.abs(x.astype(np.float64)), axis=picked, keepdims=bool(keepdims)) * scale
            assert_within_bound(got, expected, reduction_bound(abs_sum, count + 1))


def test_bit_equal_to_the_host_kernel_and_nan_kept(monkeypatch):
    """The fast kernel keeps the reference's order (np.add.reduce, then np.divide by the count) and its NaN."""
    x = RNG.standard_normal((3, 7, 11)).astype(np.float32)
    x[1, 2, 3] = np.nan
    model = _model("ReduceMean", x.shape, (1,), 0, 17)
    monkeypatch.setenv("NNHAL_CPU_REFERENCE", "1")
    with nnhal.Session(model, devices=["cpu"], num_thread=1) as s:
        reference = s.run({"x": x})[0]
    monkeypatch.delenv("NNHAL_CPU_REFERENCE")
    for got in _run_both_paths(model, x, monkeypatch):
        np.testing.assert_array_equal(got, reference)
        assert np.isnan(got[1, 3]) and np.isfinite(np.delete(got.reshape(-1), 1 * 11 + 3)).all()


def test_not_chosen_without_static_axes_or_for_integers():
    model = _model("ReduceMean", (4, 5), (1,), 1, 18)
    node = load_onnx(model).nodes[0]
    x, out = Info(np.dtype(np.float32), (4, 5)), [Info(np.dtype(np.float32), (4, 1))]
    known = Info(np.dtype(np.int64), (1,), value=np.array([1]))
    assert type(select(node, [x, known], out)) is ReduceMeanFast
    assert type(select(node, [x, Info(np.dtype(np.int64), (1,))], out)) is not ReduceMeanFast
    ints = Info(np.dtype(np.int32), (4, 5))
    assert type(select(node, [ints, known], [Info(np.dtype(np.int32), (4, 1))])) is not ReduceMeanFast
