"""Exact integer Winograd F(2x2, 3x3) for 3x3 stride-1 group-1 int8 convolutions (qnative/qwinograd.h,
integer.choose_winograd): the kernel's int32 sums equal the direct sums of (x - za) w computed in int64 (so 4 y
was divisible by 4 and exact), its requantized codes equal qkernels' direct ``conv`` bit for bit (the same
epilogue) and ONNX's formula (rounding 0, in double) on the int64 sums; in graphs the plan takes it where legal
under NNHAL_QWINOGRAD=1, equal to the direct plan, the numpy reference kernels and onnx.reference, and keeps the
direct kernel for weight zero points, stride 2, dilation 2 and too many channels. Every instruction set this CPU
has, forced by NNHAL_QGEMM_ISA (the VNNI ones take the direct kernel)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import nnhal
from nnhal.device.cpu import integer, qnative
from tests.device.cpu.isa_rerun import rerun_under_isa

pytestmark = pytest.mark.skipif(not qnative.status().available,
                                reason=f"integer kernels not loaded: {qnative.status().reason}")
RUNS_WINOGRAD = qnative.status().available and qnative.status().isa in ("avx2", "portable")
TYPES = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}

# (n, h, w, c, m, pads (top, left, bottom, right))
SHAPES = [
    (1, 5, 5, 1, 1, (1, 1, 1, 1)),
    (3, 7, 9, 13, 21, (1, 1, 1, 1)),        # odd H and W: half tiles at the bottom and right edges
    (2, 6, 5, 300, 19, (0, 0, 0, 0)),       # many channels (16-channel vectors and a tail), M not a multiple of 16
    (1, 8, 8, 64, 64, (1, 1, 1, 1)),
    (2, 9, 4, 17, 33, (0, 1, 1, 0)),        # asymmetric pads
    (1, 3, 3, 2, 5, (0, 0, 0, 0)),          # one output pixel
    (1, 20, 22, 40, 24, (1, 1, 1, 1)),      # several chunks of tiles per part
]


def _ref_sums(x, xz, w, pads):
    """int64 sums of (x - xz) w over the 3x3 window, padding read as the zero point; x NHWC, w [M, C, 3, 3]."""
    pt, pl, pb, pr = pads
    d = np.pad(x.astype(np.int64) - int(xz), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    oh, ow = d.shape[1] - 2, d.shape[2] - 2
    out = np.zeros((x.shape[0], oh, ow, w.shape[0]), np.int64)
    for ky in range(3):
        for kx in range(3):
            out += d[:, ky:ky + oh, kx:kx + ow, :] @ w[:, :, ky, kx].astype(np.int64).T
    return out


def _geometry(shape, pads):
    n, h, wd, c = shape
    oh, ow = h + pads[0] + pads[2] - 2, wd + pads[1] + pads[3] - 2
    return (n, h, wd, c, oh, ow, 3, 3, 1, 1, 1, 1, pads[0], pads[1]), (n, oh, ow)


def _case(rng, xdt, shape, extreme):
    n, h, wd, c, m, pads = shape
    info = np.iinfo(xdt)
    if extreme == "max":          # codes at both ends, weights at both ends: the largest |V| and |U|
        x = rng.choice(np.array([info.min, info.max], xdt), (n, h, wd, c))
        w = rng.choice(np.array([-128, 127], np.int8), (m, c, 3, 3))
        xz = np.array(rng.choice([info.min, info.max]), xdt)
    elif extreme == "flat":       # every code the same extreme, the zero point at the other end
        x = np.full((n, h, wd, c), info.max, xdt)
        w = np.full((m, c, 3, 3), -128, np.int8)
        xz = np.array(info.min, xdt)
    else:
        x = rng.integers(info.min, info.max + 1, (n, h, wd, c), dtype=xdt)
        w = rng.integers(-128, 128, (m, c, 3, 3), dtype=np.int8)
        xz = np.array(rng.integers(info.min, info.max + 1), xdt)
    return x, w, xz, pads


needs_winograd = pytest.mark.skipif(not RUNS_WINOGRAD, reason="the Winograd kernel runs on avx2 and portable only")


@needs_winograd
@pytest.mark.parametrize("xdt", [np.uint8, np.int8])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("extreme", ["random", "max", "flat"])
@pytest.mark.parametrize("threads", [1, 2])
def test_int32_sums_are_the_exact_direct_sums(xdt, shape, extreme, threads):
    q = qnative.kernels()
    rng = np.random.default_rng(shape[3] * 7 + shape[4])
    x, w, xz, pads = _case(rng, xdt, shape, extreme)
    geo, (n, oh, ow) = _geometry(x.shape, pads)
    m = w.shape[0]
    bias = rng.integers(-10**6, 10**6, m).astype(np.int32)
    got = np.empty((n, oh, ow, m), np.int32)
    q.winograd(x, xz.reshape(1), integer.winograd_weights(w), m, geo, got, bias, None, 0, -np.inf, np.inf, 0,
               threads)
    np.testing.assert_array_equal(got, _ref_sums(x, xz, w, pads) + bias)
    direct = np.empty_like(got)
    packed = q.pack_b(np.ascontiguousarray(w.transpose(0, 2, 3, 1)), 9 * w.shape[1], m, None, 1)
    q.conv(x, xz.reshape(1), packed, geo, direct, bias, None, 0, -np.inf, np.inf, 0, threads)
    np.testing.assert_array_equal(got, direct)


def _onnx_requantize(sums, factor, yz, dtype, lo=-np.inf, hi=np.inf):
    """ONNX's QLinearConv on int sums: the float32 factor applied in double, + zero point, rounded half to even,
    saturated (and clamped for a fused Relu)."""
    info = np.iinfo(dtype)
    q = np.rint(sums.astype(np.float64) * factor.astype(np.float64) + yz)
    return np.clip(np.clip(q, max(lo, info.min), min(hi, info.max)), info.min, info.max).astype(dtype)


@needs_winograd
@pytest.mark.parametrize("xdt", [np.uint8, np.int8])
@pytest.mark.parametrize("out_dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("shape", [SHAPES[1], SHAPES[2], SHAPES[6]])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("rounding", [0, 1])
@pytest.mark.parametrize("fused", [None, "relu", "table"])
def test_requantized_codes_equal_the_direct_conv(xdt, out_dtype, shape, per_channel, rounding, fused):
    q = qnative.kernels()
    rng = np.random.default_rng(shape[4])
    x, w, xz, pads = _case(rng, xdt, shape, "random")
    geo, (n, oh, ow) = _geometry(x.shape, pads)
    m = w.shape[0]
    bias = rng.integers(-5000, 5000, m).astype(np.int32)
    factor = (rng.uniform(2e-5, 2e-4, m) if per_channel else np.full(m, rng.uniform(2e-5, 2e-4))).astype(np.float32)
    yz = 7 if out_dtype == np.uint8 else -3
    lo, hi = (yz, np.inf) if fused == "relu" else (-np.inf, np.inf)
    table = rng.integers(0, 256, 256, dtype=np.uint8).view(out_dtype) if fused == "table" else None
    got = np.empty((n, oh, ow, m), out_dtype)
    q.winograd(x, xz.reshape(1), integer.winograd_weights(w), m, geo, got, bias, factor, yz, lo, hi, rounding, 2,
               table)
    packed = q.pack_b(np.ascontiguousarray(w.transpose(0, 2, 3, 1)), 9 * w.shape[1], m, None, 1)
    want = np.empty_like(got)
    q.conv(x, xz.reshape(1), packed, geo, want, bias, factor, yz, lo, hi, rounding, 2, table)
    assert len(np.unique(got)) > 20
    np.testing.assert_array_equal(got, want)
    if rounding == 0 and table is None:
        np.testing.assert_array_equal(got, _onnx_requantize(_ref_sums(x, xz, w, pads) + bias, factor, yz, out_dtype,
                                                            lo, hi))


@needs_winograd
def test_the_channel_bound_is_exact_and_checked():
    """WINOGRAD_MAX_C channels of the largest products keep every sum exact; one more is refused."""
    q = qnative.kernels()
    c = q.WINOGRAD_MAX_C
    assert c * 9 * 255 * 128 * 4 < 2**31 <= (c + 1) * 9 * 255 * 128 * 4
    for xv, zv in ((255, 0), (0, 255)):
        x = np.full((1, 4, 4, c), xv, np.uint8)
        w = np.full((2, c, 3, 3), -128, np.int8)
        geo, (n, oh, ow) = _geometry(x.shape, (0, 0, 0, 0))
        got = np.empty((n, oh, ow, 2), np.int32)
        q.winograd(x, np.array([zv], np.uint8), integer.winograd_weights(w), 2, geo, got, None, None, 0,
                   -np.inf, np.inf, 0, 1)
        np.testing.assert_array_equal(got, _ref_sums(x, zv, w, (0, 0, 0, 0)))
    x = np.zeros((1, 4, 4, c + 1), np.uint8)
    geo, _ = _geometry(x.shape, (0, 0, 0, 0))
    with pytest.raises(ValueError, match="channels"):
        q.winograd(x, None, integer.winograd_weights(np.zeros((2, c + 1, 3, 3), np.int8)), 2, geo,
                   np.empty((1, 2, 2, 2), np.int32), None, None, 0, -np.inf, np.inf, 0, 1)


@needs_winograd
def test_arguments_are_checked():
    q = qnative.kernels()
    x = np.zeros((1, 4, 4, 3), np.uint8)
    u = integer.winograd_weights(np.zeros((2, 3, 3, 3), np.int8))
    geo, _ = _geometry(x.shape, (0, 0, 0, 0))
    out = np.empty((1, 2, 2, 2), np.int32)
    with pytest.raises(ValueError, match="stride 1"):
        q.winograd(x, None, u, 2, geo[:8] + (2, 2) + geo[10:], out, None, None, 0, -np.inf, np.inf, 0, 1)
    with pytest.raises(ValueError, match="'u'"):
        q.winograd(x, None, u[:-1], 2, geo, out, None, None, 0, -np.inf, np.inf, 0, 1)
    with pytest.raises(TypeError, match="'u'"):
        q.winograd(x, None, u.astype(np.int32), 2, geo, out, None, None, 0, -np.inf, np.inf, 0, 1)
    misaligned = np.empty(u.size + 1, np.int16)[1:]
    misaligned[...] = u
    with pytest.raises(ValueError, match="aligned"):
        q.winograd(x, None, misaligned, 2, geo, out, None, None, 0, -np.inf, np.inf, 0, 1)


# ---------------------------------------------------------------------------------------------- graphs
def _steps(session):
    return [st for sg in session.graph.execution.subgraphs for st in sg.device_graph.steps]


def _qconv_model(xdt, c, m, shape_hw=(9, 7), n=3, per_channel=True, w_zero=0, relu=False, chain=False, **attrs):
    """x (8-bit, NCHW) -> QLinearConv (3x3) [-> QLinearConv (3x3), channels-last region] [-> clamp] -> y."""
    rng = np.random.default_rng(c * 31 + m)
    inits = {"xs": np.array(0.02, np.float32), "xz": np.array(3 if xdt == np.uint8 else -4, xdt)}
    nodes, src = [], "x"
    for i in range(2 if chain else 1):
        cin = c if i == 0 else m
        w = rng.integers(-128, 128, (m, cin, 3, 3), dtype=np.int8)
        inits.update({f"w{i}": w, f"ws{i}": rng.uniform(2e-3, 8e-3, m if per_channel else 1).astype(np.float32),
                      f"wz{i}": np.full(m if per_channel else 1, w_zero, np.int8),
                      f"ys{i}": np.array(0.1 * np.sqrt(cin), np.float32), f"yz{i}": np.array(5, xdt),
                      f"b{i}": rng.integers(-3000, 3000, m).astype(np.int32)})
        names = [src, "xs" if i == 0 else "ys0", "xz" if i == 0 else "yz0", f"w{i}", f"ws{i}", f"wz{i}", f"ys{i}",
                 f"yz{i}", f"b{i}"]
        nodes.append(helper.make_node("QLinearConv", names, [f"c{i}"], pads=attrs.get("pads", [1, 1, 1, 1]),
                                      **{k: v for k, v in attrs.items() if k != "pads"}))
        src = f"c{i}"
    if relu:      # DQ -> Relu -> Q at the conv's own parameters: a clamp folded into the conv (fuse_code_clamps)
        last = "1" if chain else "0"
        nodes += [helper.make_node("DequantizeLinear", [src, f"ys{last}", f"yz{last}"], ["f"]),
                  helper.make_node("Relu", ["f"], ["r"]),
                  helper.make_node("QuantizeLinear", ["r", f"ys{last}", f"yz{last}"], ["y"])]
    else:
        nodes.append(helper.make_node("Identity", [src], ["y"]))
    shape = (n, c) + shape_hw
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TYPES[np.dtype(xdt)], shape)],
                              [helper.make_tensor_value_info("y", TYPES[np.dtype(xdt)], None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    info = np.iinfo(xdt)
    return model, rng.integers(info.min, info.max + 1, shape, dtype=xdt)


def _run(model, x, monkeypatch, **env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    session = nnhal.Session(model, devices=["cpu"])
    (y,) = session.run({"x": x})
    for k in env:
        monkeypatch.delenv(k)
    return y, [st.kernel_name for st in _steps(session) if st.node.op_type == "QLinearConv"]


@needs_winograd
@pytest.mark.parametrize("xdt", [np.uint8, np.int8])
@pytest.mark.parametrize("c,m", [(1, 5), (13, 21), (70, 17)])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("relu,chain", [(False, False), (True, True)])
def test_graph_equals_the_direct_plan_and_the_reference_kernels(xdt, c, m, per_channel, relu, chain, monkeypatch):
    model, x = _qconv_model(xdt, c, m, per_channel=per_channel, relu=relu, chain=chain)
    got, names = _run(model, x, monkeypatch, NNHAL_QWINOGRAD="1")
    assert names and all(name.endswith("winograd") for name in names), names
    direct, names = _run(model, x, monkeypatch, NNHAL_QWINOGRAD="0")
    assert not any("winograd" in name for name in names)
    np.testing.assert_array_equal(got, direct)
    want, _ = _run(model, x, monkeypatch, NNHAL_CPU_REFERENCE="1")
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(got)) > 10


@needs_winograd
@pytest.mark.parametrize("xdt", [np.uint8, np.int8])
def test_conv_integer_equals_onnx_reference(xdt, monkeypatch):
    rng = np.random.default_rng(5)
    info = np.iinfo(xdt)
    x = rng.integers(info.min, info.max + 1, (3, 11, 7, 9), dtype=xdt)
    w = rng.integers(-128, 128, (19, 11, 3, 3), dtype=np.int8)
    zx = np.array(rng.integers(info.min, info.max + 1), xdt)
    node = helper.make_node("ConvInteger", ["x", "w", "zx"], ["y"], pads=[1, 0, 0, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TYPES[np.dtype(xdt)], x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                              [numpy_helper.from_array(v, k) for k, v in (("w", w), ("zx", zx))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    monkeypatch.setenv("NNHAL_QWINOGRAD", "1")
    session = nnhal.Session(model, devices=["cpu"])
    (got,) = session.run({"x": x})
    assert [st.kernel_name for st in _steps(session)] == ["int8 conv winograd"]
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", ["weight zero point", "stride 2", "dilation 2", "too many channels"])
def test_the_fallbacks_take_the_direct_kernel(case, monkeypatch):
    kwargs = {"weight zero point": {"w_zero": 3}, "stride 2": {"strides": [2, 2]},
              "dilation 2": {"dilations": [2, 2], "pads": [2, 2, 2, 2]}}.get(case, {})
    c = qnative.kernels().WINOGRAD_MAX_C + 1 if case == "too many channels" else 8
    model, x = _qconv_model(np.uint8, c, 4, shape_hw=(5, 5), n=1, **kwargs)
    got, names = _run(model, x, monkeypatch, NNHAL_QWINOGRAD="1")
    assert names == ["int8 conv"]
    want, _ = _run(model, x, monkeypatch, NNHAL_CPU_REFERENCE="1")
    np.testing.assert_array_equal(got, want)


def test_vnni_and_the_default_choice(monkeypatch):
    """Legal only on avx2 and portable; by default (auto) only on avx2 with at least WINOGRAD_MIN_CHANNELS on
    both sides and at most WINOGRAD_MAX_CM channel pairs; never with NNHAL_QWINOGRAD=0."""
    small = integer.WINOGRAD_MIN_CHANNELS
    model, x = _qconv_model(np.uint8, small, small, shape_hw=(6, 6), n=1)
    _, names = _run(model, x, monkeypatch)
    assert names == (["int8 conv winograd"] if qnative.status().isa == "avx2" else ["int8 conv"])
    _, names = _run(model, x, monkeypatch, NNHAL_QWINOGRAD="0")
    assert names == ["int8 conv"]
    for c, m in ((small, small - 1), (512, 512)):
        assert c * m < small * small or c * m > integer.WINOGRAD_MAX_CM
        model, x = _qconv_model(np.uint8, c, m, shape_hw=(4, 4), n=1)
        _, names = _run(model, x, monkeypatch)
        assert names == ["int8 conv"]
        _, names = _run(model, x, monkeypatch, NNHAL_QWINOGRAD="1")
        assert names == (["int8 conv winograd"] if RUNS_WINOGRAD else ["int8 conv"])


@pytest.mark.parametrize("isa", ["portable", "avx2", "avxvnni", "avx512vnni"])
def test_isa_path(isa):
    """This file's tests again with NNHAL_QGEMM_ISA=isa, in a fresh process."""
    rerun_under_isa(__file__, isa, qnative.kernels().available(), "not isa_path")


def test_the_mode_is_in_the_cpu_description(monkeypatch):
    from nnhal.device.cpu import cpu_device

    assert "3x3 stride-1 convolutions by exact integer Winograd F(2x2, 3x3) on avx2 where it measured faster" \
        in cpu_device.cpu_describe(None).summary
    for value, words in (("0", "direct (NNHAL_QWINOGRAD=0)"), ("1", "wherever legal (NNHAL_QWINOGRAD=1)")):
        monkeypatch.setenv("NNHAL_QWINOGRAD", value)
        assert words in cpu_device.cpu_describe(None).summary
