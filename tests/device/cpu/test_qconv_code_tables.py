"""A CodeTable after a group-1 QLinearConv runs in the convolution's write-back (qkernels.c conv's ``table``,
integer.fuse_code_tables): the kernel equals the convolution followed by the table lookup (numpy), on every
integer instruction set this CPU has; a quantized SiLU (DQ -> Sigmoid -> Mul -> Q, which optimizer/qtables.py
turns into a CodeTable) after a convolution equals the reference kernels bit for bit, NCHW and channels-last."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import native, qnative
from tests.device.cpu.isa_rerun import rerun_under_isa

pytestmark = pytest.mark.skipif(not qnative.status().available,
                                reason=f"integer kernels not loaded: {qnative.status().reason}")
TYPES = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}


def _steps(session):
    return [st for sg in session.graph.execution.subgraphs for st in sg.device_graph.steps]


def _conv_args(rng, out_dtype, m=21, shape=(2, 9, 7, 13), k=3):
    q = qnative.kernels()
    n, h, w, c = shape
    x = rng.integers(0, 256, shape, dtype=np.uint8)
    wt = rng.integers(-64, 65, (m, k, k, c), dtype=np.int8)
    packed = q.pack_b(np.ascontiguousarray(wt), k * k * c, m, np.zeros(1, np.int8), 1)
    geo = (n, h, w, c, h, w, k, k, 1, 1, 1, 1, k // 2, k // 2)
    factor = rng.uniform(1e-4, 2e-3, m).astype(np.float32)
    return x, packed, geo, factor, np.empty((n, h, w, m), out_dtype)


@pytest.mark.parametrize("out_dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("m", [21, 64, 5])          # column tails of the 8-wide epilogue, whole vectors, fewer
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rounding", [1, 0])        # float32 requantization (the plan's), ONNX's double one
@pytest.mark.parametrize("clamped", [False, True])  # a fused Relu's clamp inside the type's range
def test_the_table_equals_the_lookup_after_the_convolution(out_dtype, m, threads, rounding, clamped):
    q = qnative.kernels()
    rng = np.random.default_rng(m)
    x, packed, geo, factor, plain = _conv_args(rng, out_dtype, m)
    table = rng.integers(0, 256, 256, dtype=np.uint8).view(out_dtype)
    zero = 3 if out_dtype == np.uint8 else -5
    lo, hi = (zero, 100) if clamped else (-np.inf, np.inf)
    args = (x, np.full(1, 9, np.uint8), packed, geo)
    q.conv(*args, plain, None, factor, zero, lo, hi, rounding, threads)
    fused = np.empty_like(plain)
    q.conv(*args, fused, None, factor, zero, lo, hi, rounding, threads, table)
    assert len(np.unique(plain)) > 20                                 # the lookup sees many codes
    if not clamped:
        assert plain.min() == np.iinfo(out_dtype).min and plain.max() == np.iinfo(out_dtype).max   # saturated too
    np.testing.assert_array_equal(fused, table[plain.view(np.uint8)])
    q.conv(*args, fused, None, factor, zero, lo, hi, rounding, threads, None)
    np.testing.assert_array_equal(fused, plain)                       # None: no table


def test_table_arguments_are_checked():
    q = qnative.kernels()
    rng = np.random.default_rng(1)
    x, packed, geo, factor, out = _conv_args(rng, np.uint8)
    args = (x, np.full(1, 9, np.uint8), packed, geo)
    with pytest.raises(ValueError, match="table"):
        q.conv(*args, out, None, factor, 0, -np.inf, np.inf, 1, 1, np.zeros(255, np.uint8))
    with pytest.raises(TypeError, match="table"):
        q.conv(*args, out, None, factor, 0, -np.inf, np.inf, 1, 1, np.zeros(256, np.int8))
    with pytest.raises(TypeError, match="table"):
        q.conv(*args, np.empty(out.shape, np.int32), None, None, 0, -np.inf, np.inf, 0, 1, np.zeros(256, np.uint8))
    with pytest.raises(TypeError, match="arguments"):
        q.conv(*args, out, None, factor, 0, -np.inf, np.inf, 1, 1, None, None)


def _silu_model(dtype, convs: int, group: int = 1):
    """uint8 / int8 x -> ``convs`` x (QLinearConv -> DQ -> Sigmoid -> Mul -> Q) -> y."""
    rng = np.random.default_rng(41)
    dt = np.dtype(dtype)
    lo, hi = np.iinfo(dt).min, np.iinfo(dt).max
    inits = {"x_s": np.array(0.04, np.float32), "x_z": np.array(int(rng.integers(lo // 2, hi // 2)), dt)}
    nodes, x, c = [], "x", 12
    for i in range(convs):
        name = f"c{i}"
        def zero():
            return np.array(int(rng.integers(lo // 2, hi // 2)), dt)

        inits.update({f"{name}_w": rng.integers(-127, 128, (12, c // group, 3, 3), dtype=np.int8),
                      f"{name}_ws": rng.uniform(0.002, 0.01, 12).astype(np.float32),
                      f"{name}_wz": np.zeros(12, np.int8), f"{name}_ys": np.array(0.06, np.float32),
                      f"{name}_yz": zero(), f"{name}_b": rng.integers(-2000, 2000, 12).astype(np.int32),
                      f"{name}_s": np.array(0.03, np.float32), f"{name}_z": zero()})
        nodes += [helper.make_node("QLinearConv", [x, f"{x}_s", f"{x}_z", f"{name}_w", f"{name}_ws", f"{name}_wz",
                                                   f"{name}_ys", f"{name}_yz", f"{name}_b"], [f"{name}_q"],
                                   pads=[1, 1, 1, 1], group=group),
                  helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_ys", f"{name}_yz"], [f"{name}_f"]),
                  helper.make_node("Sigmoid", [f"{name}_f"], [f"{name}_g"]),
                  helper.make_node("Mul", [f"{name}_f", f"{name}_g"], [f"{name}_m"]),
                  helper.make_node("QuantizeLinear", [f"{name}_m", f"{name}_s", f"{name}_z"],
                                   ["y" if i == convs - 1 else name])]
        x = name
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TYPES[dt], (2, 12, 9, 11))],
                              [helper.make_tensor_value_info("y", TYPES[dt], None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    return model, rng.integers(lo, hi + 1, (2, 12, 9, 11), dtype=dt)


@pytest.mark.parametrize("checked", ["0", "1"])
@pytest.mark.parametrize("convs", [1, 3])                # one: NCHW (graph input and output); three: a region
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_a_quantized_silu_runs_in_the_convolution_and_equals_the_reference(dtype, convs, checked, monkeypatch):
    model, x = _silu_model(dtype, convs)
    monkeypatch.setenv("NNHAL_CHECK", checked)
    session = nnhal.Session(model, devices=["cpu"])
    (got,) = session.run({"x": x})
    steps = _steps(session)
    assert "CodeTable" not in [st.node.op_type for st in steps]
    names = [st.kernel_name for st in steps if st.node.op_type == "QLinearConv"]
    assert names and all(n.endswith("+table") for n in names), names
    monkeypatch.setenv("NNHAL_CPU_REFERENCE", "1")
    (want,) = nnhal.Session(model, devices=["cpu"]).run({"x": x})
    assert got.dtype == want.dtype == dtype
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(got)) > 10


def test_a_depthwise_convolution_keeps_its_table():
    model, x = _silu_model(np.uint8, 2, group=12)
    session = nnhal.Session(model, devices=["cpu"])
    session.run({"x": x})
    assert [st.node.op_type for st in _steps(session)].count("CodeTable") == 2


@pytest.mark.parametrize("isa", ["portable", "avx2", "avxvnni", "avx512vnni"])
def test_isa_path(isa):
    """This file's tests again with NNHAL_QGEMM_ISA=isa, in a fresh process."""
    if not native.available():
        pytest.skip(f"native kernels not loaded: {native.status().reason}")
    rerun_under_isa(__file__, isa, qnative.kernels().available(), "not isa_path")
