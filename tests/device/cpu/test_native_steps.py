"""The native step program (device/cpu/steps.py, native/nn_steps.h): runs of small element-wise steps in one C call.

Compared with the plan's interpreting loop (NNHAL_CHECK=1 runs every step by its numpy kernel) bit for bit where
the math is the same, within a few ulp for Exp and Tanh, and with onnxruntime on random graphs of these ops."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import helper, numpy_helper

import nnhal
from nnhal.conformance.tolerance import kit_policy
from nnhal.device.cpu import native
from nnhal.device.cpu.steps import broadcast
from tests.conftest import make_model, vinfo

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.status().reason}")

EXACT = ("Add", "Sub", "Mul", "Div", "Neg", "Abs", "Relu", "Clip", "Identity")


def programs(session) -> int:
    """The native step programs of the session's cpu plans, and the steps they run."""
    found = [p for sg in session.graph.execution.subgraphs if sg.device == "cpu"
             for c in sg.device_graph.chunks for p in c.programs]
    return sum(p.steps for p in found)


def run_both(model, feeds, monkeypatch):
    """(native results, numpy results, steps the programs ran) of one session."""
    with nnhal.Session(model, devices=["cpu"]) as s:
        fast = s.run(feeds)
        count = programs(s)
    monkeypatch.setenv("NNHAL_CHECK", "1")          # read at prerun: the interpreting loop, every step by its kernel
    with nnhal.Session(model, devices=["cpu"]) as s:
        slow = s.run(feeds)
    monkeypatch.delenv("NNHAL_CHECK")
    return fast, slow, count


def same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_broadcast_descriptors():
    assert broadcast((2, 3, 4), (2, 3, 4)) == (24, 1)
    assert broadcast((), (2, 3, 4)) == (1, 24)
    assert broadcast((1, 1), (2, 3)) == (1, 6)
    assert broadcast((4,), (2, 3, 4)) == (4, 1)
    assert broadcast((3, 1), (2, 3, 4)) == (3, 4)            # the channels of NCHW
    assert broadcast((1, 3, 4), (2, 3, 4)) == (12, 1)
    assert broadcast((2, 1, 4), (2, 3, 4)) is None           # two blocks of axes
    assert broadcast((5,), (2, 3, 4)) is None


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("shape_a, shape_b", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), ()), ((), (2, 3, 4)),
                                              ((2, 3, 4), (4,)), ((4,), (2, 3, 4)), ((1, 3, 5, 4), (3, 1, 1)),
                                              ((3, 1, 1), (1, 3, 5, 4)), ((2, 3, 4), (1, 3, 4)),
                                              ((2, 1, 4), (2, 3, 4)), ((2, 1), (1, 3))])
def test_binary_broadcasting_is_bit_identical(monkeypatch, op, shape_a, shape_b):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(shape_a).astype(np.float32), rng.standard_normal(shape_b).astype(np.float32)
    out = np.broadcast_shapes(shape_a, shape_b)
    # one step read twice so that no pass folds it: y = (a op b) op b
    model = make_model([helper.make_node(op, ["a", "b"], ["t"]), helper.make_node(op, ["t", "b"], ["y"])],
                       [vinfo("a", list(shape_a)), vinfo("b", list(shape_b))], [vinfo("y", list(out))])
    fast, slow, count = run_both(model, {"a": a, "b": b}, monkeypatch)
    same_bits(fast[0], slow[0])
    first = broadcast(shape_a, out) is not None and broadcast(shape_b, out) is not None \
        and out in (shape_a, shape_b)
    assert count == first + (broadcast(shape_b, out) is not None)     # the second step reads t, of out's shape


def special() -> np.ndarray:
    v = np.array([0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 3e38, -7.0, 0.5], np.float32)
    return np.concatenate([v, np.random.default_rng(2).standard_normal(36).astype(np.float32) * 4])


@pytest.mark.parametrize("op, attrs, extra", [("Neg", {}, []), ("Abs", {}, []), ("Sqrt", {}, []),
                                              ("Relu", {}, []), ("Identity", {}, []), ("Clip", {}, ["lo", "hi"]),
                                              ("Clip", {}, ["lo", ""]), ("Clip", {}, ["", "hi"])])
def test_unary_steps_are_bit_identical_on_special_values(monkeypatch, op, attrs, extra):
    x = special()
    inits = [numpy_helper.from_array(np.array(-1.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(2.0, np.float32), "hi")]
    # the first step reads x, a graph input; the second its output, in the arena
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"]), helper.make_node(op, ["x", *extra], ["u"], **attrs),
             helper.make_node(op, ["sq", *extra], ["v"], **attrs), helper.make_node("Sub", ["u", "v"], ["y"])]
    model = make_model(nodes, [vinfo("x", [48])], [vinfo("y", [48]), vinfo("u", [48])], inits)
    with np.errstate(all="ignore"):
        fast, slow, count = run_both(model, {"x": x}, monkeypatch)
    assert count >= 3
    for f, s in zip(fast, slow):
        same_bits(f, s)


@pytest.mark.parametrize("op", ["Exp", "Tanh", "Sigmoid"])
def test_transcendental_steps_within_a_few_ulp(monkeypatch, op):
    x = np.concatenate([special()[:12], np.linspace(-20, 20, 101, dtype=np.float32)])
    n = x.size
    nodes = [helper.make_node("Neg", ["x"], ["d"]), helper.make_node(op, ["d"], ["y"])]
    model = make_model(nodes, [vinfo("x", [n])], [vinfo("y", [n])])
    with np.errstate(all="ignore"):
        fast, slow, count = run_both(model, {"x": x}, monkeypatch)
    assert count == 2
    finite = np.isfinite(slow[0])
    np.testing.assert_array_equal(np.isnan(fast[0]), np.isnan(slow[0]))
    np.testing.assert_array_equal(fast[0][~finite & ~np.isnan(slow[0])], slow[0][~finite & ~np.isnan(slow[0])])
    np.testing.assert_array_max_ulp(fast[0][finite], slow[0][finite], maxulp=4)


def test_in_place_aliasing_and_outputs_in_the_middle(monkeypatch):
    """x + x, t * t (both operands the same memory), an Identity chain whose ends are graph outputs, a graph
    output read again by later steps, and the graph input itself an output."""
    nodes = [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Mul", ["a", "a"], ["b"]),
             helper.make_node("Identity", ["b"], ["c"]), helper.make_node("Identity", ["c"], ["mid"]),
             helper.make_node("Sub", ["mid", "x"], ["d"]), helper.make_node("Relu", ["d"], ["e"]),
             helper.make_node("Identity", ["e"], ["f"]), helper.make_node("Div", ["f", "mid"], ["y"]),
             helper.make_node("Identity", ["x"], ["x_out"])]
    model = make_model(nodes, [vinfo("x", [3, 5])],
                       [vinfo("y", [3, 5]), vinfo("mid", [3, 5]), vinfo("e", [3, 5]), vinfo("x_out", [3, 5])])
    x = np.random.default_rng(3).standard_normal((3, 5)).astype(np.float32)
    keep = x.copy()
    fast, slow, count = run_both(model, {"x": x}, monkeypatch)
    assert count >= 5
    np.testing.assert_array_equal(x, keep)                # the input was not written
    for f, s in zip(fast, slow):
        same_bits(f, s)
    assert not np.shares_memory(fast[3], x)


def random_graph(seed: int, length: int = 24, shape: tuple[int, ...] = (2, 3, 4)):
    """A chain of element-wise ops over ``shape`` (rank 3) with broadcasting constants, the graph inputs read again and
    some intermediate tensors as graph outputs. Values stay bounded (Div by constants in [1, 2], Exp of a Tanh)."""
    rng = np.random.default_rng(seed)
    inits, nodes, outputs = [], [], []
    live = ["x", "z"]
    const_shapes = [(), shape[2:], (shape[1], 1), (1,) + shape[1:], shape]
    for i in range(length):
        src = live[rng.integers(len(live))]
        name = f"t{i}"
        op = str(rng.choice(["Add", "Sub", "Mul", "Div", "Relu", "Neg", "Abs", "Tanh", "Sigmoid", "Clip", "Identity",
                             "SqrtAbs", "ExpTanh"]))
        if op in ("Add", "Sub", "Mul", "Div"):
            if op != "Div" and rng.random() < 0.5:
                other = live[rng.integers(len(live))]
            else:
                cshape = const_shapes[rng.integers(len(const_shapes))]
                value = rng.uniform(1.0, 2.0, cshape) if op in ("Div", "Mul") else rng.standard_normal(cshape)
                other = f"c{i}"
                inits.append(numpy_helper.from_array(np.asarray(value, np.float32), other))
            pair = [src, other] if rng.random() < 0.5 or op == "Div" else [other, src]
            nodes.append(helper.make_node(op, pair, [name]))
        elif op == "Clip":
            inits += [numpy_helper.from_array(np.array(-0.5, np.float32), f"lo{i}"),
                      numpy_helper.from_array(np.array(0.75, np.float32), f"hi{i}")]
            nodes.append(helper.make_node("Clip", [src, f"lo{i}", f"hi{i}"], [name]))
        elif op == "SqrtAbs":
            nodes += [helper.make_node("Abs", [src], [f"a{i}"]), helper.make_node("Sqrt", [f"a{i}"], [name])]
        elif op == "ExpTanh":
            nodes += [helper.make_node("Tanh", [src], [f"a{i}"]), helper.make_node("Exp", [f"a{i}"], [name])]
        else:
            nodes.append(helper.make_node(op, [src], [name]))
        live.append(name)
        if rng.random() < 0.2:
            outputs.append(name)
        if len(live) > 4:
            live.pop(int(rng.integers(2, len(live) - 1)))
    outputs.append(live[-1])
    outputs = list(dict.fromkeys(outputs))
    model = make_model(nodes, [vinfo("x", list(shape)), vinfo("z", list(shape))],
                       [vinfo(n, list(shape)) for n in outputs], inits)
    feeds = {k: rng.standard_normal(shape).astype(np.float32) for k in ("x", "z")}
    return model, feeds, {n.op_type for n in nodes}


@pytest.mark.parametrize("seed", range(12))
def test_random_graphs_against_onnxruntime_and_the_numpy_path(monkeypatch, seed):
    ort = pytest.importorskip("onnxruntime")
    model, feeds, ops = random_graph(seed)
    fast, slow, count = run_both(model, feeds, monkeypatch)
    assert count > 0
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = sess.run(None, feeds)
    tol = kit_policy("fp32", ops)
    for f, s, e in zip(fast, slow, expected):
        np.testing.assert_allclose(f, e, rtol=tol.rtol * 8, atol=tol.atol)     # 8: the chain's depth of rounding
        if not ops & {"Exp", "Tanh"}:
            same_bits(f, s)


def test_a_large_program_releases_the_gil_and_matches(monkeypatch):
    """Steps of 40K elements: the program runs with the GIL released (16K elements and up)."""
    model, feeds, ops = random_graph(7, shape=(4, 100, 100))
    fast, slow, count = run_both(model, feeds, monkeypatch)
    assert count > 0
    for f, s in zip(fast, slow):
        if ops & {"Exp", "Tanh"}:
            np.testing.assert_allclose(f, s, rtol=1e-5, atol=1e-6)
        else:
            same_bits(f, s)


def test_two_threads_run_one_session():
    model, _, _ = random_graph(5)
    rng = np.random.default_rng(9)
    feeds = [{k: rng.standard_normal((2, 3, 4)).astype(np.float32) for k in ("x", "z")} for _ in range(2)]
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        expected = [s.run(f) for f in feeds]
        assert programs(s) > 0
        failures = []

        def worker(k: int) -> None:
            for _ in range(300):
                got = s.run(feeds[k])
                if not all(np.array_equal(g, e, equal_nan=True) for g, e in zip(got, expected[k])):
                    failures.append(k)
                    return

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert failures == []


def test_program_refuses_an_overlapping_binding():
    act = native.make_act("relu")
    tensors = ((2, 0, 8), (2, 1, 8))
    program = native.Program(tensors, ((0, 1, 0, 0, 8, 1, 8, 1, None), (11, 1, 1, -1, 0, 0, 0, 0, act)), ())
    x, y = np.ones(8, np.float32), np.empty(8, np.float32)
    program.run(None, (x, y))
    np.testing.assert_array_equal(y, 2.0)
    base = np.zeros(9, np.float32)
    with pytest.raises(ValueError, match="overlap"):
        program.run(None, (base[:8], base[1:]))
    with pytest.raises(ValueError, match="must be writable"):
        frozen = y.copy()
        frozen.flags.writeable = False
        program.run(None, (x, frozen))


def test_strided_and_foreign_inputs(monkeypatch):
    """A graph input given as a strided view, and a Transpose's view, feed a program: both are made contiguous."""
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]), helper.make_node("Add", ["xt", "z"], ["a"]),
             helper.make_node("Mul", ["a", "z"], ["y"])]
    model = make_model(nodes, [vinfo("x", [4, 3]), vinfo("z", [3, 4])], [vinfo("y", [3, 4])])
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    z = rng.standard_normal((3, 8)).astype(np.float32)[:, ::2]
    fast, slow, count = run_both(model, {"x": x, "z": z}, monkeypatch)
    assert count == 2
    same_bits(fast[0], slow[0])
    same_bits(fast[0], (x.T + z) * z)
