"""Transpose as a swap of two axis groups on the native tiled kernel (device/cpu/kernels/transpose.py) and the
layout pass's NCHW <-> NHWC conversions on it: exact copies, so bit-equal to numpy."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper

import nnhal
from nnhal.device.cpu import native
from nnhal.device.cpu.kernels.transpose import swap_groups

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native kernels absent: {native.status().reason}")


def _transpose(shape, perm, dtype=np.float32, threads=2):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph([helper.make_node("Transpose", ["x"], ["y"], perm=list(perm))], "t",
                              [helper.make_tensor_value_info("x", elem, shape)],
                              [helper.make_tensor_value_info("y", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = (np.arange(int(np.prod(shape))) * 3 - 7).astype(dtype).reshape(shape)
    with nnhal.Session(model, devices=["cpu"], num_thread=threads) as s:
        (y,) = s.run({"x": x})
        kernel = [st.kernel_name for sg in s.subgraphs for st in sg.device_graph.steps][0]
    return x, y, kernel


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 33, 1, 17), (3, 1, 40, 2)])
def test_every_permutation_is_numpys(shape):
    for perm in itertools.permutations(range(len(shape))):
        x, y, kernel = _transpose(shape, perm)
        np.testing.assert_array_equal(y, x.transpose(perm))
        if swap_groups(shape, perm) is not None:
            assert kernel == "swap", (perm, kernel)


@pytest.mark.parametrize("shape, perm", [((37, 129), (1, 0)), ((2, 50, 8, 64), (0, 2, 1, 3)),
                                         ((1, 300, 17), (0, 2, 1))])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_large_swaps_split_over_threads(shape, perm, dtype):
    x, y, kernel = _transpose(shape, perm, dtype)
    assert kernel == "swap"
    np.testing.assert_array_equal(y, x.transpose(perm))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.float16, np.int64])
@pytest.mark.parametrize("shape, perm, words", [((1, 37, 4, 32), (0, 2, 1, 3), True),    # an 8-bit head split
                                                ((2, 5, 3, 12), (0, 2, 1, 3), True),
                                                ((3, 7, 5, 2), (0, 2, 1, 3), None),
                                                ((37, 129), (1, 0), None)])
def test_narrow_and_wide_elements_swap_as_words_when_rows_are_whole_words(dtype, shape, perm, words):
    # 1-, 2- and 8-byte elements move as 4-byte words when the inner run is whole words; other runs stay on
    # the reference kernel. Either way the copy is exact.
    x, y, kernel = _transpose(shape, perm, dtype)
    np.testing.assert_array_equal(y, x.transpose(perm))
    whole = shape[-1] * np.dtype(dtype).itemsize % 4 == 0 if words is None else words
    assert (kernel == "swap") == whole, (dtype, shape, kernel)


@pytest.mark.usefixtures("conversions_at_edges")     # the edges this test is about convert
def test_layout_conversions_run_on_the_tiles(monkeypatch):
    import types

    from nnhal.device.cpu import layout

    rng = np.random.default_rng(2)
    inits = [helper.make_tensor(f"w{i}", TensorProto.FLOAT, (32, c, 3, 3), rng.standard_normal(32 * c * 9).tolist())
             for i, c in enumerate((24, 32))]
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w0"], ["h"], pads=[1, 1, 1, 1]),
                               helper.make_node("Relu", ["h"], ["r"]),
                               helper.make_node("Conv", ["r", "w1"], ["y"], pads=[1, 1, 1, 1])], "c",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 24, 9, 11))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((2, 24, 9, 11)).astype(np.float32)
    calls = []

    def recording(*args):
        calls.append(args[2:6])
        return native.transpose_blocks(*args)

    monkeypatch.setattr(layout, "native", types.SimpleNamespace(available=native.available,
                                                                transpose_blocks=recording))
    with nnhal.Session(model, devices=["cpu"]) as s:
        (y,) = s.run({"x": x})
        kernels = [st.kernel_name for sg in s.subgraphs for st in sg.device_graph.steps]
    assert kernels[0] == "to-nhwc" and kernels[-1] == "to-nchw", kernels
    assert calls == [(2, 24, 99, 1), (2, 99, 32, 1)]
    # numpy's transposing copy instead: the same bits (both are exact copies)
    monkeypatch.setattr(layout, "native", types.SimpleNamespace(available=lambda: False))
    with nnhal.Session(model, devices=["cpu"]) as s:
        (want,) = s.run({"x": x})
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_few_rows_or_columns_run_unrolled_and_stay_exact(parts):
    # kernels.c nn_transpose_few (a <= 8: colour planes to NHWC) and nn_transpose_cols (b <= 4: a mask's few
    # classes back to NCHW, split by rows of x), each count, odd lengths, several outer blocks and parts
    # splitting inside and across them; the ones and nines on either side run on the tiles
    rng = np.random.default_rng(7)
    for few in range(1, 10):
        for outer, many in ((1, 1), (2, 37), (3, 515)):
            for a, b in ((few, many), (many, few)):
                x = rng.integers(-2 ** 31, 2 ** 31 - 1, (outer, a, b), dtype=np.int64).astype(np.int32)
                y = np.full((outer, b, a), 5, np.int32)
                native.transpose_blocks(x, y, outer, a, b, 1, parts)
                np.testing.assert_array_equal(y, x.transpose(0, 2, 1), err_msg=f"{(outer, a, b)}")
