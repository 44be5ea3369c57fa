"""A quantized detector's neck stays in one channels-last region on 8-bit codes (device/cpu/qlayout.py,
kernels/pool.py MaxPoolNHWC8, kernels/resize.py ResizeNHWC8, kernels/qlinear_tables.py): MaxPool and nearest
Resize of uint8 / int8 codes and com.microsoft QLinearConcat between QLinearConvs run NHWC, the plan converting
only at the region's edges; every result equals the numpy reference kernels' (NNHAL_CPU_REFERENCE=1) bit for bit
and onnx.reference's for the ONNX ops."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.device.cpu import qnative
from tests.device.cpu.isa_rerun import rerun_under_isa

pytestmark = pytest.mark.skipif(not qnative.status().available,
                                reason=f"integer kernels not loaded: {qnative.status().reason}")
TYPES = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}


def _steps(session):
    return [st for sg in session.graph.execution.subgraphs for st in sg.device_graph.steps]


def _neck_model(dtype, shape=(2, 6, 12, 10), resize_mode="nearest"):
    """x -> Q -> conv a (3x3) -> MaxPool 5x5 s1 p2 -> MaxPool 3x3 s2 p1 -> Resize x2 ; conv b (1x1) of a with
    other output parameters ; QLinearConcat(resized, b) at a third scale -> conv c (3x3) -> DQ -> y."""
    rng = np.random.default_rng(21)
    dt = np.dtype(dtype)
    lo, hi = np.iinfo(dt).min, np.iinfo(dt).max

    def zero():
        return np.array(rng.integers(lo // 4, hi // 4), dt)

    inits = {"x_s": np.array(0.03, np.float32), "x_z": zero(), "roi": np.zeros(0, np.float32),
             "scales": np.array([1, 1, 2, 2], np.float32), "cat_s": np.array(0.07, np.float32), "cat_z": zero()}
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["xq"])]

    def conv(name, x, c, m, k):
        inits.update({f"{name}_w": rng.integers(-127, 128, (m, c, k, k), dtype=np.int8),
                      f"{name}_ws": rng.uniform(0.002, 0.01, m).astype(np.float32),
                      f"{name}_wz": np.zeros(m, np.int8), f"{name}_s": np.array(rng.uniform(0.04, 0.09), np.float32),
                      f"{name}_z": zero(), f"{name}_b": rng.integers(-2000, 2000, m).astype(np.int32)})
        nodes.append(helper.make_node("QLinearConv", [x, f"{x}_s", f"{x}_z", f"{name}_w", f"{name}_ws", f"{name}_wz",
                                                      f"{name}_s", f"{name}_z", f"{name}_b"], [name],
                                      pads=[k // 2] * 4))

    inits["xq_s"], inits["xq_z"] = inits["x_s"], inits["x_z"]
    conv("a", "xq", shape[1], 16, 3)
    nodes += [helper.make_node("MaxPool", ["a"], ["p1"], kernel_shape=[5, 5], pads=[2, 2, 2, 2]),
              helper.make_node("MaxPool", ["p1"], ["p2"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
              helper.make_node("Resize", ["p2", "roi", "scales"], ["up"], mode=resize_mode)]
    conv("b", "a", 16, 8, 1)
    nodes.append(helper.make_node("QLinearConcat", ["cat_s", "cat_z", "up", "a_s", "a_z", "b", "b_s", "b_z"], ["cat"],
                                  domain="com.microsoft", axis=1))
    conv("c", "cat", 24, 12, 3)
    nodes.append(helper.make_node("DequantizeLinear", ["c", "c_s", "c_z"], ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    opsets = [helper.make_opsetid("", 19), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=9)
    x = np.random.default_rng(22).uniform(-4, 4, shape).astype(np.float32)
    return model, x


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_the_neck_runs_on_codes_channels_last(dtype):
    model, x = _neck_model(dtype)
    session = nnhal.Session(model, devices=["cpu"])
    session.run({"x": x})
    kernels = {(st.node.op_type, st.kernel_name) for st in _steps(session)}
    assert ("MaxPool", "nhwc-8bit") in kernels and ("Resize", "nhwc-8bit") in kernels
    assert ("QLinearConcat", "table") in kernels
    assert {k for op, k in kernels if op == "QLinearConv"} == {"int8 conv nhwc"}
    # one conversion into the region (the quantized image), one out of it (the last DequantizeLinear's)
    assert sorted(st.kernel_name for st in _steps(session) if st.node.op_type == "Transpose") == ["to-nchw", "to-nhwc"]


@pytest.mark.parametrize("checked", ["0", "1"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("shape", [(2, 6, 12, 10), (1, 3, 8, 14)])
def test_the_neck_equals_the_reference_kernels_bit_for_bit(dtype, shape, checked, monkeypatch):
    model, x = _neck_model(dtype, shape)
    monkeypatch.setenv("NNHAL_CHECK", checked)
    (got,) = nnhal.Session(model, devices=["cpu"]).run({"x": x})
    monkeypatch.setenv("NNHAL_CPU_REFERENCE", "1")
    (want,) = nnhal.Session(model, devices=["cpu"]).run({"x": x})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("kernel,strides,pads", [((5, 5), (1, 1), (2, 2, 2, 2)), ((3, 2), (2, 3), (1, 0, 0, 1)),
                                                 ((2, 2), (2, 2), (0, 0, 0, 0))])
def test_8bit_max_pool_and_nearest_resize_equal_onnx_reference(dtype, kernel, strides, pads):
    """MaxPool -> Resize (nearest, x2 / x3) on codes between two 1x1 QLinearConvs (so both are inside the region):
    checked against onnx.reference running the same graph with MaxPool and Resize on the codes cast to float32
    (exact: every code is a float32; onnx.reference's own integer MaxPool pads with NaN, which int8 cannot hold)."""
    rng = np.random.default_rng(23)
    dt = np.dtype(dtype)
    shape = (2, 5, 11, 13)
    inits = {"x_s": np.array(0.05, np.float32), "x_z": np.array(3, dt), "w": np.eye(5, dtype=np.int8)[:, :, None, None],
             "ws": np.full(5, 0.05, np.float32), "wz": np.zeros(5, np.int8), "roi": np.zeros(0, np.float32),
             "scales": np.array([1, 1, 2, 3], np.float32)}

    def model(in_float: bool):
        middle = [helper.make_node("MaxPool", ["a"], ["p"], kernel_shape=list(kernel), strides=list(strides),
                                   pads=list(pads)),
                  helper.make_node("Resize", ["p", "roi", "scales"], ["r"], mode="nearest")]
        if in_float:
            middle = [helper.make_node("Cast", ["a0"], ["a"], to=TensorProto.FLOAT)] + middle \
                + [helper.make_node("Cast", ["r"], ["r0"], to=TYPES[dt])]
        nodes = [helper.make_node("QLinearConv", ["x", "x_s", "x_z", "w", "ws", "wz", "x_s", "x_z"],
                                  ["a0" if in_float else "a"])] + middle \
            + [helper.make_node("QLinearConv", ["r0" if in_float else "r", "x_s", "x_z", "w", "ws", "wz", "x_s", "x_z"],
                                ["y"])]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TYPES[dt], shape)],
                                  [helper.make_tensor_value_info("y", TYPES[dt], None)],
                                  [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)

    info = np.iinfo(dt)
    x = rng.integers(info.min, info.max + 1, shape, dtype=dt)
    session = nnhal.Session(model(False), devices=["cpu"])
    (got,) = session.run({"x": x})
    kernels = [(st.node.op_type, st.kernel_name) for st in _steps(session)]
    assert ("MaxPool", "nhwc-8bit") in kernels and ("Resize", "nhwc-8bit") in kernels
    (want,) = ReferenceEvaluator(model(True)).run(None, {"x": x})
    assert got.dtype == want.dtype == dt
    np.testing.assert_array_equal(got, want)


def test_a_linear_resize_of_codes_is_not_taken():
    """Only nearest Resize moves codes unchanged; a linear one of 8-bit data stays off the 8-bit kernel."""
    model, x = _neck_model(np.uint8, resize_mode="linear")
    session = nnhal.Session(model, devices=["cpu"])
    session.run({"x": x})
    assert ("Resize", "nhwc-8bit") not in {(st.node.op_type, st.kernel_name) for st in _steps(session)}


@pytest.mark.parametrize("isa", ["portable", "avx2", "avxvnni", "avx512vnni"])
def test_isa_path(isa):
    """This file's graph tests again with NNHAL_QGEMM_ISA=isa, in a fresh process."""
    rerun_under_isa(__file__, isa, qnative.kernels().available(), "not isa_path")
