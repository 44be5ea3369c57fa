"""A Mul by a constant vector along K before DynamicQuantizeGemm (the SmoothQuant Mul of the int8 lowering)
folded into the integer GEMM's A packing (qkernels.c gemm_dynamic's ``kscale``, integer.fold_smooth_scales): the
kernel gives the bits of the Mul followed by the product, on every integer instruction set this CPU has (rows
of every quantization: int8, uint8, 7-bit; K across the packing's 512-float chunks); in a graph the Mul step is
gone and the outputs equal the plan without the fold (the float32 outlier columns within their rounding)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.device.cpu import native, qnative
from tests.device.cpu.integer_plans import assert_left_alone, model_of, run_without
from tests.device.cpu.isa_rerun import rerun_under_isa

pytestmark = pytest.mark.skipif(not qnative.status().available,
                                reason=f"integer kernels not loaded: {qnative.status().reason}")


@pytest.mark.parametrize("k", [45, 384, 513, 1100])
@pytest.mark.parametrize("signed", [0, 1])
@pytest.mark.parametrize("a7", [0, 1])
@pytest.mark.parametrize("threads", [1, 2])
def test_kscale_equals_the_mul_before_the_product(k, signed, a7, threads):
    q = qnative.kernels()
    rng = np.random.default_rng(k + 7 * signed + 3 * a7)
    m, n = 29, 40
    x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 4, k)).astype(np.float32)
    x[3] = 0.0                                                            # an all-zero row (scale 1)
    x[5, :k // 2] = np.abs(x[5, :k // 2])                                 # one-signed halves
    s = rng.uniform(0.05, 3, k).astype(np.float32)
    w = rng.integers(-127, 128, (n, k), dtype=np.int8)
    packed = q.pack_b(w, k, n, None, 1, a7)
    scale = rng.uniform(0.01, 0.02, n).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    want, got = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
    q.gemm_dynamic(np.ascontiguousarray(x * s), signed, packed, want, bias, scale, -np.inf, np.inf, threads)
    q.gemm_dynamic(x, signed, packed, got, bias, scale, -np.inf, np.inf, threads, s)
    np.testing.assert_array_equal(got, want)
    q.gemm_dynamic(x, signed, packed, got, bias, scale, -np.inf, np.inf, threads, None)     # None: no scaling
    plain = np.empty_like(got)
    q.gemm_dynamic(x, signed, packed, plain, bias, scale, -np.inf, np.inf, threads)
    np.testing.assert_array_equal(got, plain)
    assert not np.array_equal(plain, want)


def test_kscale_arguments_are_checked():
    q = qnative.kernels()
    k, n = 16, 8
    packed = q.pack_b(np.ones((n, k), np.int8), k, n, None, 1)
    x, out, scale = np.ones((3, k), np.float32), np.empty((3, n), np.float32), np.ones(n, np.float32)
    args = (x, 0, packed, out, None, scale, -np.inf, np.inf, 1)
    with pytest.raises(ValueError, match="kscale"):
        q.gemm_dynamic(*args, np.ones(k + 1, np.float32))
    with pytest.raises(TypeError, match="kscale"):
        q.gemm_dynamic(*args, np.ones(k, np.float64))
    with pytest.raises(TypeError, match="arguments"):
        q.gemm_dynamic(*args, None, 0, None)


def _smoothed_model(k=48, n=40, float_column=False, mul_is_output=False):
    """x [2, 5, k] -> Mul(s) -> two DynamicQuantizeGemm (each through its own Reshape to [10, k]) -> y0, y1; the
    second with float column 3 when ``float_column``; the Mul's output also a graph output when ``mul_is_output``."""
    rng = np.random.default_rng(5)
    inits = {"s": rng.uniform(0.2, 3, k).astype(np.float32), "shape2d": np.array([-1, k], np.int64)}
    nodes = [helper.make_node("Mul", ["x", "s"], ["xs"])]
    outputs = []
    for i in range(2):
        inits.update({f"w{i}": rng.integers(-127, 128, (n, k), dtype=np.int8),
                      f"ws{i}": rng.uniform(0.01, 0.02, n).astype(np.float32),
                      f"b{i}": rng.standard_normal(n).astype(np.float32)})
        gemm_in = [f"x2d{i}", f"w{i}", f"ws{i}", f"b{i}"]
        attrs = {"activation": "int8" if i == 0 else "uint8", "block": 0}
        if float_column and i == 1:
            inits["wf"] = rng.standard_normal((1, k)).astype(np.float32)
            gemm_in.append("wf")
            attrs["float_columns"] = [3]
        nodes += [helper.make_node("Reshape", ["xs", "shape2d"], [f"x2d{i}"]),
                  helper.make_node("DynamicQuantizeGemm", gemm_in, [f"y{i}"], domain="ai.nnhal", **attrs)]
        outputs.append(f"y{i}")
    if mul_is_output:
        outputs.append("xs")
    return model_of(nodes, inits, outputs, k, 19, rng)


def _run(model, x, fold: bool, monkeypatch):
    return run_without(model, x, monkeypatch, None if fold else "fold_smooth_scales")


@pytest.mark.parametrize("float_column", [False, True])
def test_the_mul_folds_into_both_products_and_the_outputs_stay(float_column, monkeypatch):
    model, x = _smoothed_model(float_column=float_column)
    got, steps = _run(model, x, True, monkeypatch)
    want, plain_steps = _run(model, x, False, monkeypatch)
    assert "Mul" in [st.node.op_type for st in plain_steps]
    assert "Mul" not in [st.node.op_type for st in steps]
    names = [st.kernel_name for st in steps if st.node.op_type == "DynamicQuantizeGemm"]
    assert len(names) == 2 and all(n.endswith("+kscale") for n in names), names
    np.testing.assert_array_equal(got[0], want[0])
    others = [c for c in range(got[1].shape[1]) if not (float_column and c == 3)]
    np.testing.assert_array_equal(got[1][:, others], want[1][:, others])
    if float_column:
        # x (s w) against (x s) w in float32: each of the K product terms rounded twice either way, then summed
        # in float32 (each sum's rounding error at most K u of the sum of the magnitudes): (K + 4) u of it
        init = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
        terms = np.abs(x.reshape(-1, x.shape[-1]) * init["s"]) @ np.abs(init["wf"][0])
        bound = (x.shape[-1] + 4) * np.finfo(np.float32).eps * (terms + np.abs(init["b1"][3]))
        diff = np.abs(got[1][:, 3].astype(np.float64) - want[1][:, 3])
        assert np.all(diff <= bound), (diff, bound)


def test_a_mul_read_elsewhere_too_stays(monkeypatch):
    model, x = _smoothed_model(mul_is_output=True)
    assert_left_alone(model, x, monkeypatch, "fold_smooth_scales", "Mul", "+kscale")


def test_a_scalar_mul_is_left_alone():
    """A float32 Mul with a 0-d output (the node suite's window functions) passes the fold untouched."""
    graph = helper.make_graph([helper.make_node("Mul", ["x", "c"], ["m"]), helper.make_node("Neg", ["m"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ())],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array(3.0, np.float32), "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    (y,) = nnhal.Session(model, devices=["cpu"]).run({"x": np.array(2.0, np.float32)})
    assert float(y) == -6.0


@pytest.mark.parametrize("isa", ["portable", "avx2", "avxvnni", "avx512vnni"])
def test_isa_path(isa):
    """This file's tests again with NNHAL_QGEMM_ISA=isa, in a fresh process."""
    if not native.available():
        pytest.skip(f"native kernels not loaded: {native.status().reason}")
    rerun_under_isa(__file__, isa, qnative.kernels().available(), "not isa_path")
