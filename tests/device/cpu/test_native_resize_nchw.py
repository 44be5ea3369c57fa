"""A channels-last region ending in an upsampling Resize into the graph output (a segmentation mask) writes the
output NCHW directly (device/cpu/kernels/resize.py ResizeToNCHW, kernels.c resize_to_nchw) instead of resizing in
NHWC and converting back: the same result as the NHWC kernel up to float32 re-association, and as
onnx.reference, on both plan paths and under fp16 storage; downsampling and an output that another
channels-last op reads keep the NHWC kernel and the conversion."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.device.cpu import native
from nnhal.device.cpu.kernels.resize import ResizeNHWCNative
from tests.device.cpu.test_native_resize import CASES, EPS32, _model

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native kernels absent: {native.status().reason}")

UP = ["nearest-x2", "nearest-floor-sizes", "linear-half-pixel-x2", "linear-align-corners", "cubic-x1.5",
      "linear-w-only"]
DOWN = ["linear-asymmetric-down", "linear-antialias-down"]


def _steps(model, feeds, threads=2, precision="fp32"):
    with nnhal.Session(model, devices=["cpu"], num_thread=threads, precision=precision) as s:
        got = s.run(feeds)
        steps = [(st.node.op_type, st.kernel_name) for sg in s.subgraphs for st in sg.device_graph.steps]
    return got, steps


@pytest.mark.parametrize("checked", [False, True], ids=["generated", "checked"])
@pytest.mark.parametrize("name", UP)
def test_an_upsampled_output_is_written_nchw_directly(monkeypatch, name, checked):
    if checked:
        monkeypatch.setenv("NNHAL_CHECK", "1")
    model, feeds = _model(CASES[name])
    (got,), steps = _steps(model, feeds)
    assert ("Resize", "nhwc-to-nchw") in steps, steps
    assert ("Transpose", "to-nchw") not in steps, steps
    monkeypatch.setattr(ResizeNHWCNative, "nchw_output", lambda self, node, ins, outs: None)
    (nhwc,), steps = _steps(model, feeds)
    assert ("Resize", "nhwc-native") in steps and ("Transpose", "to-nchw") in steps, steps
    # each output is sum_ij wh_i * ww_j * x_ij over at most 4 x 4 taps, taken rows first by the NHWC kernel and
    # columns first here: the two orders (and fused multiply-adds) differ by a few roundings of the sum of
    # |weight * value|, at most ~1.6x the largest value for cubic's negative weights
    peak = float(np.abs(nhwc).max()) * 2.0
    np.testing.assert_allclose(got, nhwc, rtol=0, atol=16 * EPS32 * peak)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=64 * EPS32 * peak)


@pytest.mark.parametrize("name", DOWN)
def test_a_downsampling_keeps_the_nhwc_kernel_and_the_conversion(name):
    model, feeds = _model(CASES[name])
    (got,), steps = _steps(model, feeds)
    assert ("Resize", "nhwc-native") in steps and ("Transpose", "to-nchw") in steps, steps
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=64 * EPS32 * float(np.abs(want).max()) * 2.0)


def _magnitudes(model, feeds) -> np.ndarray:
    """The reference run on |weights| and |input|: per output, the sum of |terms| of its convolution and (for
    the non-negative linear taps) its resize, the scale of the float32 / float16 rounding errors."""
    absolute = model.__class__()
    absolute.CopyFrom(model)
    for init in absolute.graph.initializer:
        if init.name.startswith("w"):
            init.CopyFrom(numpy_helper.from_array(np.abs(numpy_helper.to_array(init)), init.name))
    return ReferenceEvaluator(absolute).run(None, {k: np.abs(v) for k, v in feeds.items()})


def test_an_output_also_read_by_a_convolution_stays_nhwc():
    # the Resize's output leaves the graph and feeds a 1x1 Conv: the Conv reads the NHWC original, the graph
    # output is its one conversion
    model, feeds = _model(CASES["linear-half-pixel-x2"])
    w2 = np.random.default_rng(5).standard_normal((4, 16, 1, 1)).astype(np.float32)
    model.graph.initializer.append(numpy_helper.from_array(w2, "w2"))
    model.graph.node.append(helper.make_node("Conv", ["y", "w2"], ["z"]))
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    got, steps = _steps(model, feeds)
    assert ("Resize", "nhwc-native") in steps and ("Transpose", "to-nchw") in steps, steps
    assert ("Resize", "nhwc-to-nchw") not in steps, steps
    # two float32 sums of at most 16 terms (rows then columns of 2 taps, then 16 channels): 32 roundings of the
    # sum of |terms| bound them
    for g, w, m in zip(got, ReferenceEvaluator(model).run(None, feeds), _magnitudes(model, feeds)):
        assert np.all(np.abs(g - w) <= 32 * EPS32 * m + 1e-30)


def test_one_thread_and_two_agree_bit_for_bit():
    # channel planes are independent and each part redoes the W pass of a plane it shares: no arithmetic changes
    model, feeds = _model(CASES["cubic-x1.5"])
    (one,), _ = _steps(model, feeds, threads=1)
    (two,), steps = _steps(model, feeds, threads=2)
    assert ("Resize", "nhwc-to-nchw") in steps
    np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("checked", [False, True], ids=["generated", "checked"])
def test_fp16_storage(monkeypatch, checked):
    if checked:
        monkeypatch.setenv("NNHAL_CHECK", "1")
    model, feeds = _model(CASES["linear-align-corners"])
    (got,), steps = _steps(model, feeds, precision="fp16")
    assert ("Resize", "nhwc-to-nchw") in steps, steps
    # fp16 storage's rounding of the output is folded into the Resize (castfuse.py): no separate pass
    assert ("Cast", "round-half") not in steps[steps.index(("Resize", "nhwc-to-nchw")):], steps
    # bit-equal to the Resize followed by its own rounding step
    from nnhal.device.cpu import castfuse
    monkeypatch.setattr(castfuse, "_rounding", lambda relayout, c: False)
    (separate,), unfolded = _steps(model, feeds, precision="fp16")
    assert ("Cast", "round-half") in unfolded[unfolded.index(("Resize", "nhwc-to-nchw")):], unfolded
    np.testing.assert_array_equal(got, separate)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    (magnitude,) = _magnitudes(model, feeds)
    # float16 storage rounds the input, the weights, the conv's output and the graph output (2^-11 relative
    # each); the float32 arithmetic beside them is negligible: 4 roundings of the sum of |terms|, and one slack
    assert np.all(np.abs(np.asarray(got, np.float32) - want) <= 5 * 2.0 ** -11 * magnitude + 1e-30)
