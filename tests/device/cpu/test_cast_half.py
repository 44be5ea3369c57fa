"""The native float32 <-> float16 conversion (kernels.c nn_cast_half, device/cpu/kernels/cast.py): bit-equal to
numpy's astype (round to nearest even, overflow to inf, NaN kept, subnormals) on every value class."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import nnhal
from nnhal.device.cpu import native

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native kernels absent: {native.status().reason}")


def _values() -> np.ndarray:
    rng = np.random.default_rng(7)
    ties = (np.float32(1.0) + np.arange(0, 64, dtype=np.float32) * np.float32(2.0 ** -11))   # exact halfway points
    edges = np.array([65504, 65519.996, 65520, 65536, 1e9, -65520, 2.0 ** -24, 2.0 ** -25, 2.0 ** -26, 3 * 2.0 ** -26,
                      2.0 ** -14, 2.0 ** -14 - 2.0 ** -25, 1e-40, -0.0, 0.0, np.inf, -np.inf], np.float32)
    return np.concatenate([rng.standard_normal(10_000).astype(np.float32) * 100, ties, edges,
                           (rng.standard_normal(1000) * 1e-6).astype(np.float32)])


def _bits16(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16)


def test_float32_to_float16_is_numpys_rounding_bit_for_bit():
    x = _values()
    got = np.empty(x.size, np.float16)
    native.cast_half(x, got)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(_bits16(got), _bits16(x.astype(np.float16)))


def test_nan_stays_nan_both_ways():
    x = np.array([np.nan, -np.nan, 1.0], np.float32)
    h = np.empty(3, np.float16)
    native.cast_half(x, h)
    back = np.empty(3, np.float32)
    native.cast_half(h, back)
    assert np.isnan(h[:2]).all() and np.isnan(back[:2]).all() and back[2] == 1.0


def test_float16_to_float32_is_exact_for_every_float16():
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    got = np.empty(every.size, np.float32)
    native.cast_half(every, got)
    want = every.astype(np.float32)
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(got[finite], want[finite])
    assert np.isnan(got[~finite]).all()


def test_rounding_through_float16_in_place():
    x = _values()
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).astype(np.float32)
    y = x.copy()
    native.cast_half(y, y)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("to, src", [(TensorProto.FLOAT16, np.float32), (TensorProto.FLOAT, np.float16)])
def test_cast_nodes_run_on_the_native_conversion(to, src):
    x = (np.random.default_rng(1).standard_normal((3, 50, 7)) * 300).astype(src)
    dtype = TensorProto.FLOAT if src == np.float32 else TensorProto.FLOAT16
    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=to)], "cast",
                              [helper.make_tensor_value_info("x", dtype, x.shape)],
                              [helper.make_tensor_value_info("y", to, x.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    with nnhal.Session(model, devices=["cpu"]) as s:
        (y,) = s.run({"x": x})
        kernels = [st.kernel_name for sg in s.subgraphs for st in sg.device_graph.steps]
    assert kernels == ["half"]
    want = x.astype(np.float16 if to == TensorProto.FLOAT16 else np.float32)
    assert y.dtype == want.dtype
    np.testing.assert_array_equal(y.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("start", [0, 1, 3])
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 15, 16, 17, 31])
def test_every_length_and_alignment_converts_bit_for_bit(start, n):
    """nn_half_simd.h converts groups of 8 (unaligned loads) and the scalar loop the rest: each mode bit-equal to
    numpy on lengths around the group size, starting off the allocation's alignment."""
    x = _values()[-(n + start):][start:] if n else np.empty(0, np.float32)
    x = np.ascontiguousarray(np.concatenate([np.ones(start, np.float32), x]))[start:]
    with np.errstate(over="ignore"):
        want16 = x.astype(np.float16)
    h = np.empty(n + start, np.float16)[start:]
    native.cast_half(x, h)
    np.testing.assert_array_equal(_bits16(h), _bits16(want16))
    back = np.empty(n + start, np.float32)[start:]
    native.cast_half(h, back)
    np.testing.assert_array_equal(back, want16.astype(np.float32))
    y = x.copy()
    native.cast_half(y, y)
    np.testing.assert_array_equal(y, want16.astype(np.float32))
