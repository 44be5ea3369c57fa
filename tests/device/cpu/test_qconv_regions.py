"""Quantized convolution networks run channels-last on the integer kernels (device/cpu/qlayout.py, integer.py):
QLinearConv, per-tensor QuantizeLinear / DequantizeLinear, the fused QLinearAdd and a float MaxPool between
them share one NHWC region, so the plan converts only at its edges; the results equal the numpy reference
kernels' (NNHAL_CPU_REFERENCE=1) bit for bit, on both plan paths and every integer instruction set this CPU
has. ConvInteger runs the integer kernels and equals onnx.reference exactly (int32 sums)."""
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


def _steps(session):
    return [st for sg in session.graph.execution.subgraphs for st in sg.device_graph.steps]


def _qconv(rng, name, x, c, m, k, group=1, pads=None, **attrs):
    """QLinearConv nodes' inputs (uint8 activations, per-channel int8 weights) as initializers."""
    w = rng.integers(-127, 128, (m, c // group, k, k), dtype=np.int8)
    inits = {f"{name}_w": w, f"{name}_ws": rng.uniform(0.002, 0.01, m).astype(np.float32),
             f"{name}_wz": np.zeros(m, np.int8), f"{name}_ys": np.array(0.05, np.float32),
             f"{name}_yz": np.array(int(rng.integers(0, 40)), np.uint8),
             f"{name}_b": rng.integers(-2000, 2000, m).astype(np.int32)}
    node = helper.make_node("QLinearConv", [x, f"{x}_s", f"{x}_z", f"{name}_w", f"{name}_ws", f"{name}_wz",
                                            f"{name}_ys", f"{name}_yz", f"{name}_b"], [name], group=group,
                            pads=pads or [k // 2] * 4, **attrs)
    return node, inits


def _residual_model(shape=(2, 8, 13, 11)):
    """x -> Q -> conv a (1x1) -> conv b (3x3) -> DQ(a) + DQ(b) -> Q -> DQ -> MaxPool -> Q -> depthwise conv c
    (stride 2) -> conv d (3x3, odd pads) -> DQ -> y: the float Add and MaxPool in QDQ form, as quantizers write."""
    rng = np.random.default_rng(7)
    inits = {"x_s": np.array(0.03, np.float32), "x_z": np.array(128, np.uint8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["xq"])]
    inits["xq_s"], inits["xq_z"] = inits["x_s"], inits["x_z"]
    for spec in (("a", "xq", 8, 16, 1, 1), ("b", "a", 16, 16, 3, 1)):
        node, more = _qconv(rng, *spec[:5], group=spec[5])
        nodes.append(node)
        inits.update(more)
        inits[f"{spec[0]}_s"], inits[f"{spec[0]}_z"] = more[f"{spec[0]}_ys"], more[f"{spec[0]}_yz"]
    inits.update({"s_s": np.array(0.08, np.float32), "s_z": np.array(20, np.uint8)})
    nodes += [helper.make_node("DequantizeLinear", ["a", "a_s", "a_z"], ["af"]),
              helper.make_node("DequantizeLinear", ["b", "b_s", "b_z"], ["bf"]),
              helper.make_node("Add", ["af", "bf"], ["sum"]),
              helper.make_node("QuantizeLinear", ["sum", "s_s", "s_z"], ["s"]),
              helper.make_node("DequantizeLinear", ["s", "s_s", "s_z"], ["sf"]),
              helper.make_node("MaxPool", ["sf"], ["pf"], kernel_shape=[2, 2], strides=[1, 1]),
              helper.make_node("QuantizeLinear", ["pf", "s_s", "s_z"], ["p"])]
    inits["p_s"], inits["p_z"] = inits["s_s"], inits["s_z"]
    for spec in (("c", "p", 16, 16, 3, 16, [1, 1, 1, 1], {"strides": [2, 2]}),
                 ("d", "c", 16, 24, 3, 1, [0, 1, 2, 0], {})):
        node, more = _qconv(rng, *spec[:5], group=spec[5], pads=spec[6], **spec[7])
        nodes.append(node)
        inits.update(more)
        inits[f"{spec[0]}_s"], inits[f"{spec[0]}_z"] = more[f"{spec[0]}_ys"], more[f"{spec[0]}_yz"]
    nodes.append(helper.make_node("DequantizeLinear", ["d", "d_s", "d_z"], ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    x = np.random.default_rng(8).uniform(-3, 3, shape).astype(np.float32)
    return model, x


def test_regions_run_the_quantized_chain_channels_last(monkeypatch):
    monkeypatch.setenv("NNHAL_QWINOGRAD", "0")        # the direct kernel's name on every convolution
    model, x = _residual_model()
    session = nnhal.Session(model, devices=["cpu"])
    session.run({"x": x})
    steps = _steps(session)
    convs = [st.kernel_name for st in steps if st.node.op_type == "QLinearConv"]
    assert convs == ["int8 conv nhwc"] * 4
    # one conversion into the region (the quantized image) and one out of it (the last DequantizeLinear's)
    assert [st.kernel_name for st in steps if st.node.op_type == "Transpose"] == ["to-nhwc", "to-nchw"]
    assert any(st.node.op_type == "QLinearAdd" for st in steps)      # the fused residual, inside the region


@pytest.mark.parametrize("checked", ["0", "1"])
def test_regions_equal_the_reference_kernels_bit_for_bit(checked, monkeypatch):
    model, x = _residual_model()
    monkeypatch.setenv("NNHAL_CHECK", checked)
    (got,) = nnhal.Session(model, devices=["cpu"]).run({"x": x})
    monkeypatch.setenv("NNHAL_CPU_REFERENCE", "1")
    (want,) = nnhal.Session(model, devices=["cpu"]).run({"x": x})
    np.testing.assert_array_equal(got, want)


def test_regions_with_one_image_and_batch_one(monkeypatch):
    model, x = _residual_model((1, 8, 7, 9))
    (got,) = nnhal.Session(model, devices=["cpu"]).run({"x": x})
    monkeypatch.setenv("NNHAL_CPU_REFERENCE", "1")
    np.testing.assert_array_equal(got, nnhal.Session(model, devices=["cpu"]).run({"x": x})[0])


@pytest.mark.parametrize("isa", ["portable", "avx2", "avxvnni", "avx512vnni"])
def test_isa_path(isa):
    """This file's graph tests again with NNHAL_QGEMM_ISA=isa, in a fresh process."""
    rerun_under_isa(__file__, isa, qnative.kernels().available(), "not isa_path")


TYPES = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}
CONV_INTEGER = [  # (x shape, weight shape, group, attributes)
    ((2, 5, 9, 7), (6, 5, 3, 3), 1, {"pads": [1, 0, 2, 1], "strides": [2, 1]}),
    ((1, 3, 10, 10), (7, 3, 2, 3), 1, {"dilations": [2, 1]}),
    ((1, 8, 6, 5), (8, 1, 3, 3), 8, {"pads": [1, 1, 1, 1]}),
]


@pytest.mark.parametrize("xdt,wdt", [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)])
@pytest.mark.parametrize("case", range(len(CONV_INTEGER)))
@pytest.mark.parametrize("extreme", [False, True])
def test_conv_integer_equals_onnx_reference(xdt, wdt, case, extreme):
    x_shape, w_shape, group, attrs = CONV_INTEGER[case]
    rng = np.random.default_rng(case)
    lo_x, hi_x = np.iinfo(xdt).min, np.iinfo(xdt).max
    lo_w, hi_w = np.iinfo(wdt).min, np.iinfo(wdt).max
    if extreme:      # every product at its largest magnitude: the AVX2 path's exactness
        x = np.full(x_shape, lo_x if xdt == np.int8 else hi_x, xdt)
        w = np.full(w_shape, lo_w, wdt)
        zx, zw = np.array(hi_x, xdt), np.full(w_shape[0], hi_w, wdt)
    else:
        x = rng.integers(lo_x, hi_x + 1, x_shape, dtype=xdt)
        w = rng.integers(lo_w, hi_w + 1, w_shape, dtype=wdt)
        zx, zw = np.array(rng.integers(lo_x, hi_x + 1), xdt), rng.integers(lo_w, hi_w + 1, w_shape[0]).astype(wdt)
    node = helper.make_node("ConvInteger", ["x", "w", "zx", "zw"], ["y"], group=group, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TYPES[xdt], x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                              [numpy_helper.from_array(v, k) for k, v in (("w", w), ("zx", zx), ("zw", zw))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    session = nnhal.Session(model, devices=["cpu"])
    (got,) = session.run({"x": x})
    assert [st.kernel_name for st in _steps(session)] == ["int8 conv"]
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


def test_integer_kernels_split_over_the_cpu_device_pool():
    """With the native kernels built, the integer kernels run their parts on the cpu device's pool (qkernels.c
    imports nn_pool_api.h's capsule); a split the pool cannot take (more parts than its workers + 1) runs on
    the kernels' own threads. Every split gives the same bits."""
    from nnhal.device.cpu import native

    q = qnative.kernels()
    with pytest.raises(TypeError):
        q.uses_pool(1)
    if not native.available():
        assert not q.uses_pool()
        pytest.skip(f"native kernels not loaded: {native.status().reason}")
    assert q.uses_pool()
    native.pool_set_threads(2)
    rng = np.random.default_rng(11)
    x = rng.integers(0, 256, (2, 15, 13, 40), dtype=np.uint8)
    w = rng.integers(-128, 128, (70, 3, 3, 40), dtype=np.int8)
    packed = q.pack_b(np.ascontiguousarray(w), 360, 70, np.full(1, 3, np.int8), 1)
    geo = (2, 15, 13, 40, 15, 13, 3, 3, 1, 1, 1, 1, 1, 1)
    factor = rng.uniform(1e-4, 1e-3, 70).astype(np.float32)
    outs = []
    for threads in (1, 2, 5):           # one part; the pool (two parts); own threads (five parts)
        y = np.empty((2, 15, 13, 70), np.uint8)
        q.conv(x, np.full(1, 9, np.uint8), packed, geo, y, None, factor, 4, -np.inf, np.inf, 1, threads)
        outs.append(y)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])


@pytest.mark.parametrize("tail,fused", [("relu", True), ("relu6", True), ("relu rescaled", False)])
@pytest.mark.parametrize("group", [1, 12])
@pytest.mark.parametrize("checked", ["0", "1"])
def test_clamping_code_table_folds_into_the_convolution(tail, fused, group, checked, monkeypatch):
    """QLinearConv -> DQ -> Relu (or Clip 0..6) -> Q with the conv's own output parameters: qtables.py makes the
    tail a CodeTable that only clamps codes, and the plan folds it into the conv's requantization clamp
    (integer.fuse_code_clamps); a tail that also rescales stays a table after a depthwise conv and is applied in a
    group-1 conv's write-back (integer.fuse_code_tables). Bit-equal to the reference kernels."""
    rng = np.random.default_rng(12)
    x = rng.integers(0, 256, (2, 12, 9, 7), dtype=np.uint8)
    node, inits = _qconv(rng, "c", "x", 12, 12, 3, group=group)
    inits.update({"x_s": np.array(0.04, np.float32), "x_z": np.array(100, np.uint8),
                  "c_yz": np.array(120, np.uint8), "six": np.array(6.0, np.float32), "zero": np.array(0.0, np.float32)})
    inits["o_s"] = np.array(0.05 if tail != "relu rescaled" else 0.07, np.float32)
    inits["o_z"] = inits["c_yz"]
    act = helper.make_node("Clip", ["f", "zero", "six"], ["r"]) if tail == "relu6" \
        else helper.make_node("Relu", ["f"], ["r"])
    nodes = [node, helper.make_node("DequantizeLinear", ["c", "c_ys", "c_yz"], ["f"]), act,
             helper.make_node("QuantizeLinear", ["r", "o_s", "o_z"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    monkeypatch.setenv("NNHAL_CHECK", checked)
    session = nnhal.Session(model, devices=["cpu"])
    (got,) = session.run({"x": x})
    ops = [st.node.op_type for st in _steps(session)]
    # a rescaling tail of a group-1 convolution is applied in its write-back instead (integer.fuse_code_tables)
    assert ("CodeTable" not in ops) == (fused or group == 1), ops
    monkeypatch.setenv("NNHAL_CPU_REFERENCE", "1")
    (want,) = nnhal.Session(model, devices=["cpu"]).run({"x": x})
    np.testing.assert_array_equal(got, want)
    assert 0 < np.count_nonzero(got == 120) < got.size           # the clamp bit: some codes, not all


@pytest.mark.parametrize("checked", ["0", "1"])
def test_a_global_average_pool_keeps_the_region_channels_last(checked, monkeypatch):
    """QLinearConv -> QLinearGlobalAveragePool (com.microsoft) -> QLinearConv: the pool's channels-last variant
    (kernels/quantized.py) keeps the three in one NHWC region (one conversion in, one out), with the same codes as
    the reference kernels' channels-first pool (the same exact integer sums)."""
    rng = np.random.default_rng(21)
    shape = (2, 8, 7, 5)
    x = rng.integers(0, 256, shape, dtype=np.uint8)
    a, inits = _qconv(rng, "a", "x", 8, 16, 3)
    b, more = _qconv(rng, "b", "p", 16, 12, 1)
    inits.update(more)
    inits.update({"x_s": np.array(0.04, np.float32), "x_z": np.array(100, np.uint8),
                  "a_s": inits["a_ys"], "a_z": inits["a_yz"], "p_s": np.array(0.01, np.float32),
                  "p_z": np.array(30, np.uint8)})
    pool = helper.make_node("QLinearGlobalAveragePool", ["a", "a_s", "a_z", "p_s", "p_z"], ["p"],
                            domain="com.microsoft")
    graph = helper.make_graph([a, pool, b], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, shape)],
                              [helper.make_tensor_value_info("b", TensorProto.UINT8, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    opsets = [helper.make_opsetid("", 19), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=9)
    monkeypatch.setenv("NNHAL_CHECK", checked)
    session = nnhal.Session(model, devices=["cpu"])
    (got,) = session.run({"x": x})
    steps = [(st.node.op_type, st.kernel_name) for st in _steps(session)]
    assert ("QLinearGlobalAveragePool", "cpu nhwc") in steps, steps
    assert [k for op, k in steps if op == "Transpose"] == ["to-nhwc", "to-nchw"], steps
    monkeypatch.setenv("NNHAL_CPU_REFERENCE", "1")
    (want,) = nnhal.Session(model, devices=["cpu"]).run({"x": x})
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(got)) > 5              # not all saturated


@pytest.mark.parametrize("checked", ["0", "1"])
def test_an_average_pool_over_the_whole_image_is_a_global_one(checked, monkeypatch):
    """The int8 precision pass lowers an AveragePool whose one window is the whole unpadded image (ResNet's 7x7
    pool) as QLinearGlobalAveragePool, which runs channels last inside the conv's region; a padded one stays
    QLinearAveragePool. The codes equal the reference kernels'."""
    rng = np.random.default_rng(22)
    w = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["c"], ["g"], kernel_shape=[7, 5]),
             helper.make_node("AveragePool", ["c"], ["h"], kernel_shape=[7, 5], pads=[1, 0, 0, 0]),
             helper.make_node("Add", ["g", "h"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 7, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    x = rng.standard_normal((2, 3, 7, 5)).astype(np.float32)
    table = nnhal.calibrate(model, [{"x": x}], progress=False)
    monkeypatch.setenv("NNHAL_CHECK", checked)
    session = nnhal.Session(model, devices=["cpu"], precision="int8", calibration=table)
    (got,) = session.run({"x": x})
    ops = [st.node.op_type for st in _steps(session)]
    assert ops.count("QLinearGlobalAveragePool") == 1 and ops.count("QLinearAveragePool") == 1, ops
    monkeypatch.setenv("NNHAL_CPU_REFERENCE", "1")
    (want,) = nnhal.Session(model, devices=["cpu"], precision="int8", calibration=table).run({"x": x})
    np.testing.assert_array_equal(got, want)
    (ref,) = nnhal.Session(model).run({"x": x})
    np.testing.assert_allclose(got, ref, atol=0.05 * float(np.abs(ref).max()))


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("checked", ["0", "1"])
def test_a_code_table_after_a_residual_add_is_composed_into_its_table(shared, checked, monkeypatch):
    """conv a -> conv b -> QLinearAdd(a, b) -> DQ -> Relu -> Q at other parameters (a CodeTable that rescales)
    -> conv c: the plan composes the CodeTable into the QLinearAdd's 256 x 256 table (integer.fuse_table_tails),
    inside the NHWC region; with the Add's output read elsewhere too (``shared``) both stay. Bit-equal to the
    reference kernels on both plan paths."""
    rng = np.random.default_rng(23)
    shape = (2, 8, 9, 7)
    x = rng.integers(0, 256, shape, dtype=np.uint8)
    inits = {"x_s": np.array(0.04, np.float32), "x_z": np.array(100, np.uint8)}
    nodes = []
    for name, src, c, m, k in (("a", "x", 8, 16, 1), ("b", "a", 16, 16, 3), ("c", "r", 16, 8, 3)):
        node, more = _qconv(rng, name, src, c, m, k)
        nodes.append(node)
        inits.update(more)
        inits[f"{name}_s"], inits[f"{name}_z"] = more[f"{name}_ys"], more[f"{name}_yz"]
    inits.update({"s_s": np.array(0.09, np.float32), "s_z": np.array(60, np.uint8),
                  "r_s": np.array(0.07, np.float32), "r_z": np.array(0, np.uint8)})
    nodes[2:2] = [helper.make_node("QLinearAdd", ["a", "a_s", "a_z", "b", "b_s", "b_z", "s_s", "s_z"], ["s"],
                                   domain="com.microsoft"),
                  helper.make_node("DequantizeLinear", ["s", "s_s", "s_z"], ["sf"]),
                  helper.make_node("Relu", ["sf"], ["rf"]),
                  helper.make_node("QuantizeLinear", ["rf", "r_s", "r_z"], ["r"])]
    outputs = [helper.make_tensor_value_info("c", TensorProto.UINT8, None)]
    if shared:
        outputs.append(helper.make_tensor_value_info("s", TensorProto.UINT8, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, shape)], outputs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    opsets = [helper.make_opsetid("", 19), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=9)
    monkeypatch.setenv("NNHAL_CHECK", checked)
    session = nnhal.Session(model, devices=["cpu"])
    got = session.run({"x": x})
    steps = [(st.node.op_type, st.kernel_name) for st in _steps(session)]
    assert (("CodeTable", "table") in steps) == shared, steps
    assert (("QLinearAdd", "table+tail") in steps) == (not shared), steps
    monkeypatch.setenv("NNHAL_CPU_REFERENCE", "1")
    want = nnhal.Session(model, devices=["cpu"]).run({"x": x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert len(np.unique(got[0])) > 5
