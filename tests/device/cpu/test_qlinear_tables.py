"""com.microsoft QLinearAdd / QLinearMul / QLinearConcat with constant per-tensor parameters run as lookup
tables on the cpu device (device/cpu/kernels/qlinear_tables.py): every element equals the op's numpy reference
kernel (the tables are that kernel evaluated on every code), with broadcasting, both 8-bit types and both plan
paths; computed parameters stay on the reference."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnhal

TYPES = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}


def _model(op, dtype, shapes, params, attrs=None, live_scale=False):
    """One com.microsoft node over graph inputs x0, x1, ... of ``shapes`` with constant ``params`` (name ->
    value, in the op's input order after the inputs); with ``live_scale`` the first scale is a graph input."""
    names = [f"x{i}" for i in range(len(shapes))]
    inputs = [helper.make_tensor_value_info(n, TYPES[np.dtype(dtype)], s) for n, s in zip(names, shapes)]
    inits = []
    order = []
    for key, value in params.items():
        if key in names:
            order.append(key)
            continue
        order.append(key)
        if live_scale and key == "s0":
            inputs.append(helper.make_tensor_value_info(key, TensorProto.FLOAT, []))
        else:
            inits.append(numpy_helper.from_array(np.asarray(value), key))
    node = helper.make_node(op, order, ["y"], domain="com.microsoft", **(attrs or {}))
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TYPES[np.dtype(dtype)], None)],
                              inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=9)


def _binary_params(dtype, rng):
    z = (lambda: np.array(rng.integers(0, 256), np.uint8)) if dtype == np.uint8 else \
        (lambda: np.array(rng.integers(-128, 128), np.int8))
    return {"x0": None, "s0": np.float32(0.021), "z0": z(), "x1": None, "s1": np.float32(0.013), "z1": z(),
            "sy": np.float32(0.017), "zy": z()}


def _kernel_and_result(model, feeds, monkeypatch, check="0", reference=False):
    monkeypatch.setenv("NNHAL_CHECK", check)
    monkeypatch.setenv("NNHAL_CPU_REFERENCE", "1" if reference else "0")
    with nnhal.Session(model, devices=["cpu"]) as session:
        (y,) = session.run(feeds)
        names = [st.kernel_name for sg in session.graph.execution.subgraphs for st in sg.device_graph.steps]
    return names, y


def _codes(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape, dtype=dtype)


@pytest.mark.parametrize("check", ["0", "1"])
# the native gather takes equal shapes and an operand repeating along the other (one value, or its trailing
# axes: either side); (8, 1, 1) against (2, 8, 5, 5) stays on numpy's take
@pytest.mark.parametrize("shapes", [((2, 8, 5, 5), (2, 8, 5, 5)), ((2, 8, 5, 5), (8, 1, 1)), ((1, 5), (3, 4, 5)),
                                    ((3, 4, 6), (6,)), ((3, 4, 6), (1,))])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_binary_tables_equal_the_reference_kernel(op, dtype, shapes, check, monkeypatch):
    rng = np.random.default_rng(hash((op, shapes)) % 2 ** 32)
    model = _model(op, dtype, shapes, _binary_params(dtype, rng))
    feeds = {f"x{i}": _codes(rng, dtype, s) for i, s in enumerate(shapes)}
    names, got = _kernel_and_result(model, feeds, monkeypatch, check)
    assert names == ["table"]
    ref_names, want = _kernel_and_result(model, feeds, monkeypatch, check, reference=True)
    assert ref_names != ["table"]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("check", ["0", "1"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_concat_tables_equal_the_reference_kernel(dtype, check, monkeypatch):
    rng = np.random.default_rng(9)
    zero = np.array(3, dtype)
    params = {"sy": np.float32(0.02), "zy": zero,
              "x0": None, "s_a": np.float32(0.02), "z_a": zero,                   # the output's own parameters
              "x1": None, "s_b": np.float32(0.031), "z_b": np.array(-7 if dtype == np.int8 else 200, dtype),
              "x2": None, "s_c": np.float32(0.007), "z_c": zero}
    shapes = [(1, 3, 4, 4), (1, 5, 4, 4), (1, 2, 4, 4)]
    model = _model("QLinearConcat", dtype, shapes, params, {"axis": 1})
    feeds = {f"x{i}": _codes(rng, dtype, s) for i, s in enumerate(shapes)}
    names, got = _kernel_and_result(model, feeds, monkeypatch, check)
    assert names == ["table"]
    _, want = _kernel_and_result(model, feeds, monkeypatch, check, reference=True)
    np.testing.assert_array_equal(got, want)


def test_a_computed_scale_stays_on_the_reference_and_is_correct(monkeypatch):
    rng = np.random.default_rng(10)
    shapes = ((2, 6), (2, 6))
    params = _binary_params(np.uint8, rng)
    model = _model("QLinearMul", np.uint8, shapes, params, live_scale=True)
    feeds = {"x0": _codes(rng, np.uint8, shapes[0]), "x1": _codes(rng, np.uint8, shapes[1]),
             "s0": np.array(0.021, np.float32)}
    names, got = _kernel_and_result(model, feeds, monkeypatch)
    assert names != ["table"]
    constant = _model("QLinearMul", np.uint8, shapes, params)
    _, want = _kernel_and_result(constant, {k: v for k, v in feeds.items() if k != "s0"}, monkeypatch)
    np.testing.assert_array_equal(got, want)


class _Counting:
    """The integer kernels' module with its ``binary`` / ``table2`` calls counted."""

    def __init__(self, module):
        self.module, self.calls = module, {"binary": 0, "table2": 0}

    def __getattr__(self, name):
        attr = getattr(self.module, name)
        if name not in self.calls:
            return attr

        def counted(*args):
            self.calls[name] += 1
            return attr(*args)
        return counted


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning", "ignore:divide by zero:RuntimeWarning")
@pytest.mark.parametrize("y_scale", [0.017, 0.0])          # 0: the reference divides by zero (inf, NaN)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_binary_is_computed_where_that_reproduces_the_table(op, dtype, y_scale, monkeypatch):
    """With AVX2 integer kernels, QLinearAdd / QLinearMul run the computed ``binary`` once it has reproduced
    the table on all 65536 pairs at prepare (else the gather); either way every element equals the reference."""
    from nnhal.device.cpu import qnative
    from nnhal.device.cpu.kernels import qlinear_tables

    if not qnative.available():
        pytest.skip(f"integer kernels not loaded: {qnative.status().reason}")
    counting = _Counting(qnative.kernels())
    monkeypatch.setattr(qlinear_tables, "_native", lambda: counting)
    rng = np.random.default_rng(11)
    params = _binary_params(dtype, rng)
    params["sy"] = np.float32(y_scale)
    shapes = ((4, 3, 37), (37,))
    model = _model(op, dtype, shapes, params)
    feeds = {f"x{i}": _codes(rng, dtype, s) for i, s in enumerate(shapes)}
    names, got = _kernel_and_result(model, feeds, monkeypatch)
    assert names == ["table"]
    _, want = _kernel_and_result(model, feeds, monkeypatch, reference=True)
    np.testing.assert_array_equal(got, want)
    runs = counting.calls["binary"] - 2 * (qnative.status().isa != "portable")   # less the two prepare checks
    if qnative.status().isa == "portable":
        assert counting.calls == {"binary": 0, "table2": 1}
    elif y_scale:
        assert (runs, counting.calls["table2"]) == (1, 0)
