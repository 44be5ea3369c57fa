"""The patch-embedding Conv (kernels/conv_patch.py: kernel == strides, no padding) on both plan paths against
a float64 convolution, within the reordered-sum bound: ViT's stem, a crop of rows and columns past the last
window, batches, a fused Relu; other geometries keep the general kernel."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import nnhal
from nnhal.conformance.tolerance import assert_within_bound, matmul_bound, unit_roundoff
from tests.conftest import make_model, vinfo


@pytest.fixture(params=["straight", "checked"])
def path(request, monkeypatch):
    monkeypatch.setenv("NNHAL_CHECK", "1" if request.param == "checked" else "0")
    return request.param


def conv_model(n, c, h, w, m, k, relu, pads=(0, 0, 0, 0)):
    rng = np.random.default_rng(h * k)
    weights = (rng.standard_normal((m, c, k, k)) / k).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    oh, ow = (h + pads[0] + pads[2] - k) // k + 1, (w + pads[1] + pads[3] - k) // k + 1
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if relu else "y"], kernel_shape=[k, k], strides=[k, k],
                              pads=list(pads))]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    model = make_model(nodes, [vinfo("x", [n, c, h, w])], [vinfo("y", [n, m, oh, ow])],
                       [numpy_helper.from_array(weights, "w"), numpy_helper.from_array(bias, "b")])
    return model, weights, bias


def run(model, x):
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        (got,) = s.run({"x": x})
        steps = [(st.node.op_type, st.kernel_name) for st in s.subgraphs[0].device_graph.steps]
    return got, steps


@pytest.mark.parametrize("n,c,h,w,m,k,relu", [(1, 3, 112, 112, 192, 16, False), (2, 5, 30, 27, 7, 4, True),
                                             (1, 16, 8, 8, 24, 2, False)])
def test_a_patch_embedding_is_one_gemm_per_image(path, n, c, h, w, m, k, relu):
    model, weights, bias = conv_model(n, c, h, w, m, k, relu)
    x = np.random.default_rng(n + c).standard_normal((n, c, h, w)).astype(np.float32)
    got, steps = run(model, x)
    assert steps == [("Conv", "patch")], steps
    oh, ow = h // k, w // k
    cols = x[:, :, :oh * k, :ow * k].reshape(n, c, oh, k, ow, k).transpose(0, 2, 4, 1, 3, 5).reshape(n, oh, ow, -1)
    wmat = weights.reshape(m, -1).T
    want = (cols.astype(np.float64) @ wmat + bias).transpose(0, 3, 1, 2)
    magnitude = (np.abs(cols.astype(np.float64)) @ np.abs(wmat) + np.abs(bias)).transpose(0, 3, 1, 2)
    # the sums in any order, then one rounding of the bias add (Relu is 1-Lipschitz: the bound holds after it)
    bound = matmul_bound(cols, wmat).transpose(0, 3, 1, 2) + 2 * unit_roundoff() * magnitude
    assert_within_bound(got, np.maximum(want, 0) if relu else want, bound)


def test_padding_keeps_the_general_kernel(path):
    model, _, _ = conv_model(1, 3, 12, 12, 4, 4, False, pads=(1, 1, 1, 1))
    _, steps = run(model, np.ones((1, 3, 12, 12), np.float32))
    assert steps[0][0] == "Conv" and steps[0][1] != "patch", steps
