"""Softmax over a middle axis on the cpu device (kernels/softmax.py's native column path, nn_softmax.h's
nn_softmax_cols_f32) against onnxruntime, and with infinities and NaN against the reference kernel's function."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import native
from nnhal.hostkernels._reduce import softmax
from tests.conftest import make_model, vinfo

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")
pytestmark = pytest.mark.skipif(not native.available(), reason="the middle-axis Softmax is native only")


def softmax_model(shape, axis, nodes=(), src="x"):
    return make_model([*nodes, helper.make_node("Softmax", [src], ["y"], axis=axis)], [vinfo("x", list(shape))],
                      [vinfo("y", list(shape))])


def run_nnhal(model, feeds):
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s, np.errstate(invalid="ignore"):
        got = s.run(feeds)
        steps = s.subgraphs[0].device_graph.steps
    return got, steps


# (1, 4, 16, 2100): a DFL head's bins, 2100 columns (9 chunks of at most 256, the last partial);
# axis 0 of (6, 300): one outer block; axis -3 of (2, 5, 3, 7): 21 columns
# (2, 5, 1, 1) over axis 1: trailing axes of size 1, a last-axis softmax of rows of 5
@pytest.mark.parametrize("shape,axis", [((1, 4, 16, 2100), 2), ((6, 300), 0), ((2, 5, 3, 7), -3), ((3, 1, 9), 1),
                                        ((2, 5, 1, 1), 1)])
def test_softmax_over_a_middle_axis_runs_native_and_matches_onnxruntime(shape, axis):
    rng = np.random.default_rng(len(shape))
    x = (rng.standard_normal(shape) * 8).astype(np.float32)
    x[(slice(None),) * (axis % len(shape)) + (0,)] -= 200.0     # one row far below the column maxima
    model = softmax_model(shape, axis)
    (got,), steps = run_nnhal(model, {"x": x})
    assert [st.kernel_name for st in steps] == ["fast"]
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    # exp by nn_expf (a few ulp) and a float32 sum of at most 16 terms: a few float32 ulp of each result
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got.sum(axis), 1.0, rtol=1e-5)


def test_columns_with_infinities_and_nan_match_the_reference_kernel():
    x = np.random.default_rng(5).standard_normal((2, 6, 300)).astype(np.float32)
    x[0, 2, 7] = np.inf           # its column NaN where the reference makes it so
    x[1, :, 260] = -np.inf         # a column of -inf in the second chunk
    x[1, 3, 9] = np.nan
    x[0, :, 100] = -np.inf
    x[0, 4, 100] = 1.0             # a masked column with one live entry: exactly one-hot
    (got,), steps = run_nnhal(softmax_model(x.shape, 1), {"x": x})
    assert [st.kernel_name for st in steps] == ["fast"]
    with np.errstate(invalid="ignore"):
        want = softmax(x, (1,))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-8, equal_nan=True)
    assert np.isnan(got[1, :, 260]).all() and np.isnan(got[1, :, 9]).all()
    assert np.isfinite(got[0, :, 8]).all() and (got[0, :, 100] == np.eye(6, dtype=np.float32)[4]).all()


def test_a_middle_axis_softmax_in_place_after_a_product_matches_onnxruntime():
    rng = np.random.default_rng(6)
    shape = (1, 4, 8, 333)
    nodes = [helper.make_node("Mul", ["x", "k"], ["m"])]
    model = make_model([*nodes, helper.make_node("Softmax", ["m"], ["y"], axis=2)], [vinfo("x", list(shape))],
                       [vinfo("y", list(shape))], [numpy_helper.from_array(np.float32(1.5).reshape(()), "k")])
    x = rng.standard_normal(shape).astype(np.float32)
    (got,), _ = run_nnhal(model, {"x": x})
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_the_native_entry_rejects_an_inner_that_is_not_the_last_axis():
    x = np.zeros((2, 3, 8), np.float32)
    with pytest.raises(ValueError, match="inner"):
        native.softmax(x, np.empty_like(x), 4, 1)


def test_float64_over_a_middle_axis_stays_with_the_reference():
    model = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=1)],
                       [vinfo("x", [2, 3, 4], TensorProto.DOUBLE)], [vinfo("y", [2, 3, 4], TensorProto.DOUBLE)])
    x = np.random.default_rng(7).standard_normal((2, 3, 4))
    (got,), steps = run_nnhal(model, {"x": x})
    assert [st.kernel_name for st in steps] != ["fast"]
    np.testing.assert_allclose(got, softmax(x, (1,)), rtol=1e-12)
