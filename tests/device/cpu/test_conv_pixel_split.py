"""Convolutions split by output pixels (device/cpu/parallel.py PIXEL_ALIGN; native/kernels.c nn_conv_task for the im2col
kernel, the pointwise GEMM's row_align in kernels/_conv_nhwc.py): at 2 and 3 threads the result stays within the
reordered-reduction bound of the one-thread result, and of onnxruntime's, for maps whose pixels are fewer than the
threads times the alignment, odd maps whose rows split unevenly, and batches whose parts cross images.

The bound: each output is a sum of K = C kh kw products and the bias, evaluated by BLAS in blocks whose order may
depend on the rows a GEMM call holds (nnhal.conformance.tolerance.reduction_bound over |x| * |w| + |bias|)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.conformance.tolerance import assert_within_bound, reduction_bound
from nnhal.device.cpu import native, parallel
from nnhal.device.cpu.kernels._conv_nhwc import ConvGemmNHWC
from nnhal.hostkernels import _conv2d

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")
pytestmark = pytest.mark.skipif(not native.available(), reason="the native pool is not loaded")

# (n, c, h, w, m, k, stride, pad, path)
CASES = [
    (1, 48, 7, 7, 40, 3, 1, 1, "im2col"),       # 49 pixels: 7 rows split 3 : 4, pixels 24 : 25
    (1, 48, 5, 3, 40, 3, 1, 1, "im2col"),       # 15 pixels
    (1, 48, 3, 3, 40, 3, 2, 1, "im2col"),       # 2x2: fewer pixels than one part's alignment
    (2, 48, 9, 9, 24, 3, 2, 0, "im2col"),       # 2 images of 4x4: a part crosses from one image into the next
    (1, 48, 7, 7, 40, 1, 1, 0, "1x1"),
    (3, 64, 3, 5, 72, 1, 1, 0, "1x1"),          # 45 pixels over 3 images
    (1, 64, 1, 1, 72, 1, 1, 0, "1x1"),          # one pixel
]


@pytest.fixture
def pool(monkeypatch):
    """Every plan on the pools, parts of any size, and never the direct kernel (which takes small maps on some CPUs:
    these convolutions are for the im2col and pointwise ones)."""
    monkeypatch.setenv("NNHAL_CPU_POOL", "1")
    monkeypatch.setenv("NNHAL_DIRECT", "0")
    monkeypatch.setattr(parallel, "MIN_NATIVE_PART_WORK", 1)
    before = parallel._pool.threads
    yield
    parallel.set_threads(before)


def _model(n, c, h, w, m, k, stride, pad, rng):
    wt = (rng.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[k, k], strides=[stride, stride],
                            pads=[pad] * 4)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(wt, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), wt, b


def _abs_conv(x, wt, b, stride, pad):
    """|x| convolved with |w|, plus |bias|, in float64: the sum of the terms' magnitudes of each output."""
    xp = np.pad(np.abs(x).astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    k = wt.shape[2]
    oh, ow = (xp.shape[2] - k) // stride + 1, (xp.shape[3] - k) // stride + 1
    aw = np.abs(wt).astype(np.float64)
    out = np.zeros((x.shape[0], wt.shape[0], oh, ow))
    for i in range(k):
        for j in range(k):
            patch = xp[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
            out += np.einsum("nchw,mc->nmhw", patch, aw[:, :, i, j])
    return out + np.abs(b)[None, :, None, None]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:8])) + "-" + c[8])
def test_a_convolution_split_by_pixels_matches_one_thread(pool, case):
    *geo, path = case
    n, c, h, w, m, k, stride, pad = geo
    rng = np.random.default_rng(sum(geo))
    model, wt, b = _model(*geo, rng)
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    geometry = _conv2d.Conv2d(n, c, h, w, m, 1, (k, k), (stride, stride), (1, 1), (pad, pad, pad, pad), oh, ow,
                              np.dtype(np.float32))
    assert ConvGemmNHWC.path(geometry) == path
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    got = {}
    for t in (1, 2, 3):
        with nnhal.Session(model, devices=["cpu"], num_thread=t) as s:
            got[t] = s.run({"x": x})[0]
    bound = reduction_bound(_abs_conv(x, wt, b, stride, pad), c * k * k + 1)
    for t in (2, 3):
        assert_within_bound(got[t], got[1], bound)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert_within_bound(got[1], want, bound)
