"""com.microsoft QAttention (what onnxruntime's quantize_dynamic writes for BERT-style Attention): its QKV
projection on the cpu device's integer GEMM (dequantizing epilogue), the self-attention in float32, against
onnxruntime within float32 rounding, with and without a mask; the numpy kernel against the same; unsupported
forms rejected by typed errors naming the node.

NOTE: weights are kept within |w| <= 64, where onnxruntime's AVX2 u8 x s8 kernel (which saturates 16-bit
pair sums beyond) is exact on every CPU."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import native, qnative
from nnhal.errors import NnhalError

ort = pytest.importorskip("onnxruntime")

B, S, K, HEADS, HEAD = 2, 11, 40, 3, 8
HIDDEN = HEADS * HEAD


def _model(rng, mask: str, w_dtype=np.int8, per_column=False, **attrs):
    lo = -64 if w_dtype == np.int8 else 64
    inits = {"w": rng.integers(lo, lo + 129, (K, 3 * HIDDEN)).astype(w_dtype),
             "bias": (rng.standard_normal(3 * HIDDEN) * 0.2).astype(np.float32),
             "xs": np.array(0.03, np.float32),
             "ws": (rng.uniform(0.002, 0.006, 3 * HIDDEN) if per_column else np.array(0.004)).astype(np.float32),
             "xz": np.array(118, np.uint8),
             "wz": np.array(0 if w_dtype == np.int8 else 128, w_dtype)}
    inputs = [helper.make_tensor_value_info("x", TensorProto.UINT8, [B, S, K])]
    mask_name = ""
    if mask == "lengths":
        inputs.append(helper.make_tensor_value_info("m", TensorProto.INT32, [B]))
        mask_name = "m"
    elif mask == "raw":
        inputs.append(helper.make_tensor_value_info("m", TensorProto.INT32, [B, S]))
        mask_name = "m"
    node = helper.make_node("QAttention", ["x", "w", "bias", "xs", "ws", mask_name, "xz", "wz"], ["y"],
                            name="qatt", domain="com.microsoft", num_heads=HEADS, **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=9)
    feeds = {"x": rng.integers(0, 256, (B, S, K)).astype(np.uint8)}
    if mask == "lengths":
        feeds["m"] = np.array([S, 6], np.int32)
    elif mask == "raw":
        feeds["m"] = (rng.random((B, S)) > 0.3).astype(np.int32)
        feeds["m"][:, 0] = 1
    return model, feeds


def _run(model, feeds):
    with nnhal.Session(model, devices=["cpu"]) as session:
        (got,) = session.run(feeds)
        kernels = [st.kernel_name for sg in session.graph.execution.subgraphs for st in sg.device_graph.steps
                   if st.node.op_type == "QAttention"]
    return got, kernels


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("mask", ["none", "lengths", "raw"])
@pytest.mark.parametrize("w_dtype,per_column", [(np.int8, False), (np.uint8, False), (np.int8, True)])
@pytest.mark.parametrize("path", ["integer", "pooled", "reference"])
def test_qattention_matches_onnxruntime(mask, w_dtype, per_column, path, monkeypatch):
    from nnhal.device.cpu import integer

    rng = np.random.default_rng(31)
    model, feeds = _model(rng, mask, w_dtype, per_column)
    if path == "reference":
        monkeypatch.setenv("NNHAL_CPU_REFERENCE", "1")
    elif path == "pooled":
        monkeypatch.delitem(integer._KERNELS, ("com.microsoft", "QAttention"))
    got, kernels = _run(model, feeds)
    if path == "integer" and qnative.status().available and native.available():
        assert kernels == ["int8 gemm"]
    elif path == "pooled":
        assert kernels == ["pooled"]
    else:
        assert kernels and kernels != ["int8 gemm"]
    want = _ort(model, feeds)
    assert got.shape == want.shape == (B, S, HIDDEN) and got.dtype == np.float32
    # the same exact QKV sums; the dequantization, the scores, the softmax and the weighted sum round in
    # float32 (different summation orders): a few ulp of the values' scale, for K and S of a few dozen
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("what,attrs", [("unidirectional", {"unidirectional": 1}), ("num_heads", {})])
def test_unsupported_qattention_is_a_typed_error_naming_the_node(what, attrs):
    rng = np.random.default_rng(32)
    model, feeds = _model(rng, "none", **attrs)
    if what == "num_heads":
        model.graph.node[0].attribute[0].i = 5           # 24 columns per part are not 5 heads
    with pytest.raises(NnhalError, match=rf"'qatt' \(com.microsoft::QAttention, opset 1\).*{what}"):
        with nnhal.Session(model, devices=["cpu"]) as session:
            session.run(feeds)
