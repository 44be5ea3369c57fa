"""fp16: the CPU's float16 storage with float32 compute, and fp16 through If / Loop bodies.

Tolerance: NNAPI's relaxed fp32-to-fp16 mode, atol = rtol = 5 * 2^-10 against fp32. NNAPI states it per
op; across a whole network the errors of its layers add up, so for a model the absolute part scales with
the output's magnitude (max |fp32|, at least 1). The same holds for fp16 computed in float16: on the
digits CNN its worst element is 0.85-1.18x the per-element bound, float32 compute's 0.74-1.15x.
"""
from __future__ import annotations

from importlib import resources

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal
from nnhal.conformance.tolerance import reduction_bound, rounded_within
from nnhal.device.cpu.fp16 import round_to_half
from nnhal.device.device import Allocator, Description, Device, Optimizer
from nnhal.device.manager import find_device, register_device, unregister_device
from nnhal.optimizer.precision import half, to_fp16
from tests.conftest import make_model, vinfo

RELAXED = 5 * 2.0 ** -10
F16 = np.dtype(np.float16)


def relaxed_close(fp16: np.ndarray, fp32: np.ndarray) -> None:
    """Within NNAPI's relaxed tolerance, its absolute part scaled by the output's magnitude."""
    np.testing.assert_allclose(fp16, fp32, rtol=RELAXED, atol=RELAXED * max(1.0, float(np.abs(fp32).max())))


def run(model, feeds, precision: str, devices=None) -> list[np.ndarray]:
    with nnhal.Session(model, precision=precision, devices=devices, strict=True) as s:
        return s.run(feeds)


# ------------------------------------------------------------------ describe
def test_cpu_describes_how_it_computes_fp16():
    desc = find_device("cpu").describe()
    assert "fp16" in desc.precisions
    assert desc.compute["fp16"] == "float16 storage (weights, subgraph boundaries), float32 compute"
    assert "float32 compute" in desc.summary
    assert "fp32" not in desc.compute          # fp32 is computed as named


# ------------------------------------------------------------ the semantics
def _linear_model(w: np.ndarray, b: np.ndarray):
    return make_model([helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
                       helper.make_node("Add", ["m", "b"], ["y"], name="add")],
                      [vinfo("x", [4, w.shape[0]])], [vinfo("y", [4, w.shape[1]])],
                      [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])


def test_fp16_rounds_weights_inputs_and_outputs_and_computes_in_fp32():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    y = run(_linear_model(w, b), {"x": x}, "fp16")[0]
    assert y.dtype == np.float32
    x16, w16, b16 = round_to_half(x), round_to_half(w), round_to_half(b)
    wide = x16 @ w16 + b16                                            # float32 products of float16 values
    # float16 roundings of that float32 sum, summed in any order: 64 products and the bias
    bound = reduction_bound(np.abs(x16.astype(np.float64)) @ np.abs(w16) + np.abs(b16), 65)
    why = rounded_within(y, wide, bound, F16)
    assert why is None, why
    assert not np.array_equal(y, x @ w + b)
    relaxed_close(y, x @ w + b)


def test_fp16_subgraph_rounds_its_boundary_to_float16_values_in_one_native_step(relu_add_model):
    x = np.linspace(-3, 3, 8, dtype=np.float32).reshape(2, 4) + np.float32(1e-4)    # not float16 values
    with nnhal.Session(relu_add_model, precision="fp16", strict=True) as s:
        (z,) = s.run({"x": x})
        (sg,) = s.subgraphs
        steps = [(st.node.op_type, st.kernel_name) for st in sg.device_graph.steps]
    assert sg.precision == "fp16"
    # the boundary stays float32 (the core converts nothing); its values are float16 values
    assert sg.input_formats == {} and sg.output_formats == {}
    assert z.dtype == np.float32 and np.array_equal(z, round_to_half(z))
    # a Cast to float16 and back at each edge, each pair one native rounding step
    casts = [n for n in sg.nodes if n.op_type == "Cast"]
    assert [int(n.attrs["to"]) for n in casts] == [TensorProto.FLOAT16, TensorProto.FLOAT] * 2
    assert [k for op, k in steps if op == "Cast"] == ["round-half", "round-half"]
    inner = {o for node in sg.nodes if node.op_type != "Cast" for o in node.inputs + node.outputs}
    assert {str(sg.graph.tensors[n].dtype) for n in inner} == {"float32"}
    assert np.array_equal(sg.graph.tensors["b"].value, round_to_half(sg.graph.tensors["b"].value))
    # the same as rounding the input and b, computing in float32 and rounding the output (one float32 add per
    # element: no summation order, so bit equality holds)
    b16 = round_to_half(np.linspace(-1, 1, 4, dtype=np.float32))
    want = round_to_half(np.maximum(np.maximum(round_to_half(x), 0) + b16, 0))
    np.testing.assert_array_equal(z, want)


def test_fp16_keeps_single_element_constants_in_float32():
    # a coefficient of the compute (here x / sqrt 2) keeps its float32 value; a weight vector is rounded
    sqrt2 = np.array(1.4142135381698608, np.float32)
    w = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    model = make_model([helper.make_node("Div", ["x", "s"], ["d"]), helper.make_node("Mul", ["d", "w"], ["y"])],
                       [vinfo("x", [2, 4])], [vinfo("y", [2, 4])],
                       [numpy_helper.from_array(sqrt2, "s"), numpy_helper.from_array(w, "w")])
    with nnhal.Session(model, precision="fp16", strict=True) as s:
        s.run({"x": np.ones((2, 4), np.float32)})
        (sg,) = s.subgraphs
    assert sg.graph.tensors["s"].value == sqrt2
    assert np.array_equal(sg.graph.tensors["w"].value, round_to_half(w)) and not np.array_equal(w, round_to_half(w))


def test_half_saturates_finite_values_and_keeps_inf_and_nan():
    values = np.array([1e9, -1e9, np.inf, -np.inf, np.nan, 1.0 / 3.0], np.float32)
    got = half(values)
    assert got.dtype == F16
    np.testing.assert_array_equal(got[:4], np.array([65504, -65504, np.inf, -np.inf], F16))
    assert np.isnan(got[4]) and got[5] == np.float16(1.0 / 3.0)


# ------------------------------------------------------------------ models
def test_digits_cnn_fp16_within_relaxed_tolerance():
    model = str(resources.files("nnhal.data").joinpath("digits_cnn.onnx"))
    x = np.random.default_rng(1).uniform(0, 1, (16, 1, 8, 8)).astype(np.float32)
    fp32 = run(model, {"input": x}, "fp32")[0]
    fp16 = run(model, {"input": x}, "fp16")[0]
    assert not np.array_equal(fp16, fp32)
    relaxed_close(fp16, fp32)
    assert (fp16.argmax(1) == fp32.argmax(1)).all()


def test_zoo_squeezenet_fp16_within_relaxed_tolerance():
    from nnhal.zoo import input_for, resolve

    model = resolve("zoo:squeezenet?weights=random")
    feeds = input_for(model)
    fp32 = run(model, feeds, "fp32")[0]
    fp16 = run(model, feeds, "fp16")[0]
    relaxed_close(fp16, fp32)


# ------------------------------------------------------- subgraph attributes
def _branch(name: str, value: list[float], reads_x: bool):
    """A body with a float constant: x + c (reading x from the outer scope) or c alone, then Cast to float."""
    const = helper.make_node("Constant", [], [f"{name}_c"],
                             value=numpy_helper.from_array(np.array(value, np.float32), f"{name}_value"))
    body = helper.make_node("Add", ["x", f"{name}_c"], [f"{name}_y"]) if reads_x else \
        helper.make_node("Identity", [f"{name}_c"], [f"{name}_y"])
    cast = helper.make_node("Cast", [f"{name}_y"], [f"{name}_z"], to=TensorProto.FLOAT)
    return helper.make_graph([const, body, cast], name, [], [vinfo(f"{name}_z", None)])


def if_model(reads_x: bool):
    """y = x + (if sum(x) > 0 then [x +] c1 else [x +] c2): float constants inside both branches."""
    return make_model(
        [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
         helper.make_node("Greater", ["s", "zero"], ["cond"], name="positive"),
         helper.make_node("If", ["cond"], ["t"], name="if",
                          then_branch=_branch("then", [0.1, 1.5, 2.25], reads_x),
                          else_branch=_branch("else", [-0.1, -1.5, -2.25], reads_x)),
         helper.make_node("Add", ["t", "x"], ["y"], name="add")],
        [vinfo("x", [3])], [vinfo("y", [3])], [numpy_helper.from_array(np.array(0, np.float32), "zero")])


def loop_model():
    """y = x + 3 * 0.1 through a Loop whose body adds a float constant to the carried value."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Constant", [], ["step"], value=numpy_helper.from_array(np.array(0.1, np.float32), "s")),
         helper.make_node("Add", ["acc_in", "step"], ["acc_out"])],
        "body", [vinfo("i", [], TensorProto.INT64), vinfo("cond_in", [], TensorProto.BOOL), vinfo("acc_in", None)],
        [vinfo("cond_out", [], TensorProto.BOOL), vinfo("acc_out", None)])
    return make_model(
        [helper.make_node("Loop", ["trips", "", "x"], ["y"], body=body, name="loop")],
        [vinfo("x", [3])], [vinfo("y", [3])], [numpy_helper.from_array(np.array(3, np.int64), "trips")])


def scan_model():
    """y = sum over rows of xs * 0.1 through a Scan whose body multiplies by a float constant."""
    body = helper.make_graph(
        [helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.array(0.1, np.float32), "k")),
         helper.make_node("Mul", ["row", "k"], ["scaled"]),
         helper.make_node("Add", ["acc_in", "scaled"], ["acc_out"])],
        "body", [vinfo("acc_in", [3]), vinfo("row", [3])], [vinfo("acc_out", [3])])
    return make_model(
        [helper.make_node("Scan", ["init", "xs"], ["y"], body=body, num_scan_inputs=1, name="scan")],
        [vinfo("xs", [4, 3])], [vinfo("y", [3])], [numpy_helper.from_array(np.zeros(3, np.float32), "init")])


@pytest.fixture
def half_device():
    """The CPU's kernels with the float16-storage-and-compute pass (precision.to_fp16)."""
    cpu = find_device("cpu")
    device = Device("halfcpu", cpu.interface,
                    Allocator(describe=lambda d: Description(cpu.describe().ops, ("fp32", "fp16")),
                              evaluation=cpu.allocator.evaluation),
                    Optimizer(optimize_graph=lambda sg, precision: to_fp16(sg) if precision == "fp16" else sg))
    register_device(device)
    yield ["halfcpu"]
    unregister_device("halfcpu")


@pytest.mark.parametrize("reads_x", [True, False], ids=["branch-reads-outer", "branch-constant"])
@pytest.mark.parametrize("devices", ["cpu", "halfcpu"])
def test_if_with_float_constants_in_branches_runs_in_fp16(reads_x, devices, request):
    devs = request.getfixturevalue("half_device") if devices == "halfcpu" else ["cpu"]
    model = if_model(reads_x)
    for x in (np.array([1.0, 2.0, 3.0001], np.float32), np.array([-1.0, -2.0, -3.0001], np.float32)):
        fp16 = run(model, {"x": x}, "fp16", devs)[0]
        fp32 = run(model, {"x": x}, "fp32")[0]
        relaxed_close(fp16, fp32)
        assert np.array_equal(fp16, fp16.astype(F16).astype(np.float32))     # rounded to fp16 at the output


def test_cpu_fp16_rounds_the_constants_of_if_branches():
    with nnhal.Session(if_model(reads_x=False), precision="fp16", strict=True) as s:
        s.run({"x": np.ones(3, np.float32)})
        (sg,) = s.subgraphs
    (node,) = [n for n in sg.nodes if n.op_type == "If"]
    for branch, first in (("then_branch", 0.1), ("else_branch", -0.1)):
        (const,) = [t.value for t in node.attrs[branch].tensors.values() if t.is_constant]
        assert const.dtype == np.float32 and const[0] == np.float32(np.float16(first)) != np.float32(first)


@pytest.mark.parametrize("devices", ["cpu", "halfcpu"])
def test_loop_and_scan_with_float_constants_in_bodies_run_in_fp16(devices, request):
    devs = request.getfixturevalue("half_device") if devices == "halfcpu" else ["cpu"]
    x = np.array([1.0, -2.0, 1000.0], np.float32)
    relaxed_close(run(loop_model(), {"x": x}, "fp16", devs)[0], x + np.float32(0.3))
    xs = np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32)
    relaxed_close(run(scan_model(), {"xs": xs}, "fp16", devs)[0], xs.sum(0) * np.float32(0.1))
