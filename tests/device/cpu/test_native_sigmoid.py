"""The native Sigmoid and SiLU activations (kernels.c nn_apply; on AVX2 + FMA CPUs the intrinsic path of
nn_exp_simd.h, else the plain C loop; test_native_plain_paths.py reruns this file with NNHAL_NATIVE_SIMD=0)
against their float64 definitions: standalone over runs of every length modulo 8, on extreme values, and fused
into a convolution's epilogue against onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import native
from nnhal.hostkernels.fused import activation_of

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native kernels absent: {native.status().reason}")

EPS = float(np.finfo(np.float32).eps)
EXTREMES = np.array([0.0, -0.0, 1e-30, -1e-30, 1.0, -1.0, 16.7, -16.7, 40.0, -40.0, 87.0, -87.0, 88.5, -88.5,
                     88.8, -88.8, 100.0, -100.0, 1e30, -1e30, np.inf, -np.inf, np.nan], np.float32)


def _exact(kind: str, x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        sig = 1.0 / (1.0 + np.exp(-x64))
        return sig if kind == "sigmoid" else x64 * sig


def _bound(kind: str, x: np.ndarray, want: np.ndarray) -> np.ndarray:
    """What the float32 computation may miss by: the exp polynomial's ~2 ulp, one ulp each for 1 + e, the
    division and (SiLU) the product, so 8 ulps of the result; plus, below x = -87.3 where exp(-x) is clamped
    (nn_expf's range), the whole (tiny) value: the result is then 0 or a denormal-range number."""
    tail = np.where(x < -87.0, np.abs(want), 0.0)
    return 8 * EPS * np.abs(want) + np.finfo(np.float32).tiny + tail


def _act(kind: str):
    return native.make_act(kind)


@pytest.mark.parametrize("kind", ["sigmoid", "silu"])
@pytest.mark.parametrize("size", [1, 7, 8, 9, 15, 16, 17, 23, 1000, 70001], ids=lambda s: f"n{s}")
def test_activation_matches_its_definition(kind, size):
    rng = np.random.default_rng(size)
    x = (rng.standard_normal(size) * 12).astype(np.float32)
    x[:min(size, EXTREMES.size)] = EXTREMES[:min(size, EXTREMES.size)]
    want = _exact(kind, x)
    for out_of_place in (False, True):
        got = np.empty_like(x) if out_of_place else x.copy()
        native.activation(x if out_of_place else got, got, _act(kind), 1)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        inf = np.isinf(want)
        np.testing.assert_array_equal(got[inf], want[inf])
        fin = ok & ~inf
        err = np.abs(got[fin].astype(np.float64) - want[fin])
        bound = _bound(kind, x[fin], want[fin])
        assert np.all(err <= bound), (x[fin][err > bound], got[fin][err > bound], want[fin][err > bound])


@pytest.mark.parametrize("kind", ["sigmoid", "silu"])
def test_saturation_and_special_values(kind):
    """Large negative inputs give exactly 0 past exp's overflow (-x above 88.72), large positive ones
    sigmoid 1 (SiLU x); NaN stays NaN; -0 and +0 give 0.5 (SiLU +-0)."""
    x = np.array([-1e30, -100.0, -88.8, 1e30, 100.0, 30.0, np.nan, 0.0, -0.0, -np.inf, np.inf] * 2, np.float32)
    got = np.empty_like(x)
    native.activation(x, got, _act(kind), 1)
    sig = kind == "sigmoid"
    want = np.array([0, 0, 0, 1 if sig else 1e30, 1 if sig else 100, 1 if sig else 30, np.nan,
                     0.5 if sig else 0, 0.5 if sig else -0.0, 0 if sig else np.nan, 1 if sig else np.inf] * 2,
                    np.float32)
    np.testing.assert_array_equal(got, want)


def _conv_silu_model(c: int, m: int, k: int, stride: int, group: int, hw: int, n: int, kind: str):
    rng = np.random.default_rng(c * 31 + m)
    w = numpy_helper.from_array((rng.standard_normal((m, c // group, k, k)) / np.sqrt(c // group * k * k))
                                .astype(np.float32) * 3, "w")
    b = numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["p"], kernel_shape=[k, k], strides=[stride, stride],
                              pads=[k // 2] * 4, group=group),
             helper.make_node("Sigmoid", ["p"], ["s" if kind == "silu" else "y"])]
    if kind == "silu":
        nodes.append(helper.make_node("Mul", ["p", "s"], ["y"]))
    oh = (hw + 2 * (k // 2) - k) // stride + 1
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, m, oh, oh])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("kind", ["sigmoid", "silu"])
@pytest.mark.parametrize("c,m,k,stride,group,hw", [(13, 37, 1, 1, 1, 11), (21, 21, 3, 2, 21, 15),
                                                    (40, 40, 5, 1, 40, 9), (3, 19, 3, 2, 1, 17)],
                         ids=["1x1-odd", "dw3x3-s2-odd", "dw5x5", "stem-s2"])
def test_fused_into_convolutions_matches_onnxruntime(kind, c, m, k, stride, group, hw):
    """The gate fused into a 1x1, a depthwise and a direct convolution's epilogue (odd channel counts, batch 2,
    stride 2): against onnxruntime within the reassociated dot products' bound (fan-in times 2 ulps of the
    magnitudes summed, the gate's 8 ulps, and the gate's slope <= 1.1 carrying the sum's error)."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle (test extra)")
    model = _conv_silu_model(c, m, k, stride, group, hw, 2, kind)
    x = np.random.default_rng(5).standard_normal((2, c, hw, hw)).astype(np.float32)
    sess = nnhal.Session(model, devices=["cpu"])
    (got,) = sess.run({"x": x})
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    fan = c // group * k * k
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=8 * EPS, atol=(2 * fan + 16) * EPS * scale * 4)
    steps = [st for sg in sess.graph.execution.subgraphs for st in sg.device_graph.steps]
    convs = [st for st in steps if st.node.op_type == "Conv"]
    assert len(convs) == 1 and activation_of(convs[0].node).kind == kind, steps
    assert not [st for st in steps if st.node.op_type in ("Sigmoid", "Mul")], steps
