"""optimizer/precision.py: ``conv_levels`` narrows the weights the int8 pass writes for group-1 convolutions
(and Gemm / MatMul as 1x1 QLinearConv) to [-conv_levels, conv_levels] (the cpu device passes 64 on AVX2, where
its integer GEMM multiplies 7-bit weights with vpmaddubsw, exact); depthwise convolutions and weights already
on an int8 grid (a pre-quantized model's) keep 127 levels; a network quantized either way stays close to fp32."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import nnhal
from nnhal.device.cpu import cpu_device
from nnhal.optimizer.precision import _lower_weighted, _on_int8_grid
from nnhal.optimizer.quantize import per_channel_int8
from nnhal.serializer.onnx_import import load_onnx
from tests.conftest import make_model, vinfo


def _model(prequantized: bool = False):
    """x -> Conv (group 1) -> Relu -> depthwise Conv -> Flatten -> MatMul -> y."""
    rng = np.random.default_rng(11)
    wa = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    if prequantized:          # int8 codes (peak 127 per channel) times a per-channel scale
        codes = rng.integers(-127, 128, wa.shape)
        codes[:, 0, 0, 0] = 127
        wa = (codes * rng.uniform(1e-3, 1e-2, (8, 1, 1, 1))).astype(np.float32)
    inits = {"wa": wa, "wd": (rng.standard_normal((8, 1, 3, 3)) * 0.3).astype(np.float32),
             "wm": (rng.standard_normal((8 * 9 * 7, 10)) * 0.05).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "wd"], ["d"], pads=[1, 1, 1, 1], group=8),
             helper.make_node("Flatten", ["d"], ["f"]),
             helper.make_node("MatMul", ["f", "wm"], ["y"])]
    model = make_model(nodes, [vinfo("x", [2, 3, 9, 7])], [vinfo("y", [2, 10])],
                       [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return model, rng.standard_normal((2, 3, 9, 7)).astype(np.float32)


def _lowered_weights(model, levels):
    g = load_onnx(model)
    g.tensors["f"].shape = (2, 8 * 9 * 7)        # the MatMul's 2-D input, as shape inference gives it
    return {n.name or n.op_type + str(i): _lower_weighted(n, g, lambda name: True, per_channel_int8, levels)
            for i, n in enumerate(g.nodes) if n.op_type in ("Conv", "MatMul")}


def test_conv_levels_narrow_group_one_convolutions_and_matmuls_only():
    model, _ = _model()
    wide, narrow = _lowered_weights(model, 127), _lowered_weights(model, 64)
    assert list(wide) == list(narrow) and len(wide) == 3
    (conv, dw, mm) = (narrow[k][1][0] for k in narrow)
    assert np.abs(conv).max() == 64 and np.abs(mm).max() == 64     # each channel's peak is at most 64
    assert np.abs(dw).max() == 127                                  # depthwise: no narrow kernel, full range
    for k in wide:
        assert np.abs(wide[k][1][0]).max() == 127


def test_weights_already_on_an_int8_grid_keep_their_codes():
    model, _ = _model(prequantized=True)
    w = next(t for t in model.graph.initializer if t.name == "wa")
    assert _on_int8_grid(numpy_helper.to_array(w))
    rng = np.random.default_rng(0)
    assert not _on_int8_grid(rng.standard_normal((8, 27)).astype(np.float32))
    per_tensor = rng.integers(-40, 41, (8, 27))                  # one scale for the tensor, its peak code 127
    per_tensor[3, 5] = -127
    assert _on_int8_grid((per_tensor * np.float32(0.0123)).astype(np.float32))
    conv = next(iter(_lowered_weights(model, 64).values()))
    wq, scale = conv[1]
    assert np.abs(wq).max() == 127
    np.testing.assert_allclose(wq.astype(np.float64) * scale.reshape(-1, 1, 1, 1), numpy_helper.to_array(w),
                               rtol=1e-6, atol=0)


@pytest.mark.parametrize("narrow", ["0", "1"])
def test_a_network_quantized_with_either_width_stays_close_to_fp32(narrow, monkeypatch):
    model, x = _model()
    feeds = {"x": x}
    monkeypatch.setenv("NNHAL_NARROW_WEIGHTS", narrow)
    assert cpu_device.conv_weight_levels() == (64 if narrow == "1" else 127)
    with nnhal.Session(model, devices=["cpu"]) as fp32:
        want = fp32.run(feeds)[0]
    table = nnhal.calibrate(model, [feeds], progress=False)
    for precision in ("int8", "uint8"):
        with nnhal.Session(model, devices=["cpu"], precision=precision, calibration=table) as q:
            got = q.run(feeds)[0]
        # 7-bit weights: twice the weight step of 8-bit ones (1/64 of each channel's peak)
        assert np.linalg.norm(got - want) <= 0.05 * np.linalg.norm(want), precision


def test_the_cpu_description_says_which_weights_its_convolutions_take(monkeypatch):
    monkeypatch.setenv("NNHAL_NARROW_WEIGHTS", "1")
    assert "int8 convolution weights 7-bit" in cpu_device.cpu_describe(None).summary
    monkeypatch.setenv("NNHAL_NARROW_WEIGHTS", "0")
    assert "int8 convolution weights 8-bit" in cpu_device.cpu_describe(None).summary
