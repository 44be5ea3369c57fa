"""Bound convolution and pooling steps of the CPU plan (device/cpu/straight.py bind; kernels/_conv_nhwc.py, pool.py,
_nhwc.py GlobalPool): each bound kernel against its plain run (the interpreting loop, NNHAL_CHECK=1) and onnxruntime,
per-set scratch and views under two threads, a thread-count change, graph outputs, declined and failing binds."""
from __future__ import annotations

from functools import partial

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import nnhal
from nnhal.device.cpu import straight
from tests.conftest import make_model, vinfo
from tests.device.cpu.test_cpu_bind import (
    bound_nodes,
    declined,
    ort_run,
    plans,
    two_sets_concurrently,
    two_then_one_thread,
    unbind,
)

RNG = np.random.default_rng(11)


def _weights(name: str, m: int, cg: int, k: int):
    # scaled by 1/sqrt(fan-in): unit-scale outputs layer after layer
    return numpy_helper.from_array((RNG.standard_normal((m, cg, k, k)) / np.sqrt(cg * k * k)).astype(np.float32), name)


def _bias(name: str, m: int):
    return numpy_helper.from_array((RNG.standard_normal(m) * 0.1).astype(np.float32), name)


# kind -> (channels, side, per-layer node maker); every layer keeps (C, side) so the chain repeats
KINDS = {
    "winograd": (64, 14, dict(k=3, pads=1)),                 # 3x3 64->64 at 14x14: native Winograd
    "direct": (16, 14, dict(k=3, pads=1)),                   # few channels: the direct kernel
    "small_map": (64, 7, dict(k=3, pads=1)),                 # 3x3 64->64 at 7x7: the direct kernel
    "im2col": (128, 14, dict(k=3, pads=2, dilation=2)),      # dilated (no Winograd), wide: native im2col
    "pointwise": (192, 28, dict(k=1, pads=0)),               # 1x1 of wide channels at 28x28: the prepared GEMM
    "depthwise": (32, 14, dict(k=3, pads=1, group=32)),      # the native depthwise kernel
    "grouped": (64, 14, dict(k=3, pads=1, group=4)),         # 16 channels a group: the native grouped kernel
    "maxpool": (32, 14, None),
    "avgpool": (32, 14, None),
}


def chain(kind: str, n: int = 3, act: str | None = "Relu", bias: bool = True, out_conv: bool = False):
    """x (1, C, H, W) -> Relu -> n layers of ``kind`` (a conv with its bias and activation, or a 3x3 stride-1 pool)
    -> Neg -> y: the middle layers read and write planned buffers (bindable); the layout pass runs them channels
    last. ``out_conv``: the last layer writes the graph output itself (no Neg after it)."""
    c, side, conv = KINDS[kind]
    nodes, inits, prev = [helper.make_node("Relu", ["x"], ["h"], name="relu_in")], [], "h"
    for i in range(n):
        last = out_conv and i == n - 1
        out = "y" if last else f"t{i}"
        if conv is not None:
            group, k, p = conv.get("group", 1), conv["k"], conv["pads"]
            inits.append(_weights(f"w{i}", c, c // group, k))
            ins = [prev, f"w{i}"]
            if bias:
                inits.append(_bias(f"b{i}", c))
                ins.append(f"b{i}")
            conv_out = f"c{i}" if act else out
            d = conv.get("dilation", 1)
            nodes.append(helper.make_node("Conv", ins, [conv_out], name=f"op{i}", kernel_shape=[k, k],
                                          pads=[p] * 4, group=group, dilations=[d, d]))
            if act:
                nodes.append(helper.make_node(act, [conv_out], [out], name=f"act{i}"))
        elif kind == "maxpool":
            nodes.append(helper.make_node("MaxPool", [prev], [out], name=f"op{i}", kernel_shape=[3, 3],
                                          pads=[1, 1, 1, 1]))
        else:
            nodes.append(helper.make_node("AveragePool", [prev], [out], name=f"op{i}", kernel_shape=[3, 3],
                                          pads=[1, 1, 1, 1], count_include_pad=i % 2))
        prev = out
    if not out_conv:
        nodes.append(helper.make_node("Neg", [prev], ["y"], name="neg_out"))
    shape = [1, c, side, side]
    return make_model(nodes, [vinfo("x", shape)], [vinfo("y", shape)], inits)


def gap_model():
    """x -> 1x1 conv (a planned NHWC map) -> GlobalAveragePool -> 1x1 conv -> Sigmoid (a squeeze-excite gate) ->
    y; the pooled vector is a planned buffer between two bound steps."""
    c, side = 32, 14
    inits = [_weights("w0", c, c, 1), _bias("b0", c), _weights("w1", c, c, 1), _bias("b1", c),
             _weights("w2", c, c, 1)]
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="relu_in"),
             helper.make_node("Conv", ["h", "w0", "b0"], ["f"], name="op0", kernel_shape=[1, 1]),
             helper.make_node("GlobalAveragePool", ["f"], ["g"], name="gap"),
             helper.make_node("Conv", ["g", "w1", "b1"], ["e"], name="op1", kernel_shape=[1, 1]),
             helper.make_node("Sigmoid", ["e"], ["s"], name="gate"),
             helper.make_node("Mul", ["f", "s"], ["z"], name="scale"),
             helper.make_node("Conv", ["z", "w2"], ["q"], name="op2", kernel_shape=[1, 1]),
             helper.make_node("Neg", ["q"], ["y"], name="neg_out")]
    return make_model(nodes, [vinfo("x", [1, c, side, side])], [vinfo("y", [1, c, side, side])], inits)


def feed(model, seed: int = 0) -> dict:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def tolerance(kind: str, ref: np.ndarray) -> dict:
    """From the computation: float32 sums of C * 9 unit-scale products, three layers deep, rounding to a few ulps
    of the outputs' size; Winograd F(4x4, 3x3)'s transforms add cancellation (their coefficients reach 5.3 and the
    point products are summed through them): ~1e-5 of the outputs' scale a layer."""
    scale = float(np.abs(ref).max())
    return dict(rtol=1e-4, atol=(3e-4 if kind == "winograd" else 3e-5) * scale)


@pytest.mark.parametrize("pool", ["0", "1"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_bound_conv_and_pool_steps_equal_the_plain_run_and_onnxruntime(monkeypatch, kind, pool):
    monkeypatch.setenv("NNHAL_CPU_POOL", pool)
    model = chain(kind)
    x = feed(model)
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        fast = s.run(x)[0]
        again = s.run(x)[0]
        assert {"op0", "op1", "op2"} <= bound_nodes(s)
        assert "neg_out" not in bound_nodes(s)
        # the kernels bound them, but for the paths that leave the product to numpy or the bands to Python threads
        # when the pools are off (the 1x1 GEMM, im2col and Winograd): their bind declines then
        refused = set(declined(s))
        if pool == "0" and kind in ("winograd", "im2col", "pointwise"):
            assert {"op0", "op1", "op2"} <= {name.split("/")[0] for name in refused}
        else:
            assert not refused
    monkeypatch.setenv("NNHAL_CHECK", "1")            # the interpreting loop: every kernel's plain run
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        plain = s.run(x)[0]
    np.testing.assert_array_equal(fast, again)
    # the bound call is the plain run's native call on the same operands and split: the same arithmetic
    np.testing.assert_allclose(fast, plain, rtol=1e-6, atol=1e-6 * float(np.abs(plain).max()))
    ref = ort_run(model, x)
    np.testing.assert_allclose(fast, ref, **tolerance(kind, ref))


def test_the_chain_kinds_take_the_paths_they_name(monkeypatch):
    """The chains above reach the kernels they are named for (else the test above tests something else)."""
    monkeypatch.setenv("NNHAL_CPU_POOL", "1")
    want = {"winograd": "run_winograd", "direct": "run_native", "small_map": "run_native", "im2col": "run_im2col",
            "pointwise": "run_1x1", "depthwise": "run_native", "grouped": "run_native"}
    for kind, qual in want.items():
        model = chain(kind)
        with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
            s.run(feed(model))
            (plan,) = plans(s)
            runs = [st.run for st in plan.steps if st.node.name.split("/")[0] == "op1"]
            assert runs and runs[0].__qualname__.split(".")[-1] == qual, (kind, runs)


@pytest.mark.parametrize("pool", ["0", "1"])
def test_a_bound_squeeze_excite_block(monkeypatch, pool):
    monkeypatch.setenv("NNHAL_CPU_POOL", pool)
    model = gap_model()
    x = feed(model)
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        fast = s.run(x)[0]
        assert "gap" in bound_nodes(s)
        assert "gap" not in declined(s)
    ref = ort_run(model, x)
    np.testing.assert_allclose(fast, ref, rtol=1e-4, atol=3e-5 * float(np.abs(ref).max()))


@pytest.mark.parametrize("kind", ["winograd", "im2col", "depthwise"])
def test_two_threads_on_one_session_get_their_own_bound_views_and_scratch(monkeypatch, kind):
    """Two threads run one Session on different inputs at once: each run takes its own buffer set, bound on its own
    views and its own scratch (im2col columns, Winograd tiles); every result equals the single-threaded run's."""
    monkeypatch.setenv("NNHAL_CPU_POOL", "1")
    model = chain(kind, n=4)
    feeds = [feed(model, seed) for seed in range(2)]
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        sets = two_sets_concurrently(s, feeds, 40)
        # no array a set's bound calls hold (views, scratch) is another set's arena or another set's scratch
        held_arrays = {id(b): [a for calls in b.bound.values() for call in calls for a in _arrays(call)]
                       for b in sets}
        for mine in sets:
            for other in sets:
                if other is mine:
                    continue
                for a in held_arrays[id(mine)]:
                    assert not np.shares_memory(a, other.arena)
                    # the prepared constants (transformed weights, bias) are the plan's, shared on purpose
                    for o in held_arrays[id(other)]:
                        assert a is o or not np.shares_memory(a, o)


def _arrays(call) -> list[np.ndarray]:
    """The arrays a bound call holds: a partial's arguments, a closure's cells (and the tuples in them)."""
    if isinstance(call, partial):
        return [a for a in call.args if isinstance(a, np.ndarray)]
    found = []
    for cell in getattr(call, "__closure__", None) or ():
        value = cell.cell_contents
        items = value if isinstance(value, list) else [value]
        for item in items:
            for a in item if isinstance(item, tuple) else (item,):
                if isinstance(a, np.ndarray):
                    found.append(a)
    return found


@pytest.mark.parametrize("kind", ["winograd", "pointwise", "maxpool"])
def test_a_thread_count_change_rebinds(monkeypatch, kind):
    monkeypatch.setenv("NNHAL_CPU_POOL", "1")
    model = chain(kind)
    x = feed(model)
    two, one = two_then_one_thread(model, x)
    ref = ort_run(model, x)
    np.testing.assert_allclose(one, two, rtol=1e-5, atol=1e-6 * float(np.abs(two).max()))
    np.testing.assert_allclose(one, ref, **tolerance(kind, ref))


@pytest.mark.parametrize("kind", ["direct", "pointwise", "winograd"])
def test_a_conv_writing_a_graph_output_keeps_its_plain_run(monkeypatch, kind):
    """The last conv writes the graph output (a fresh array each run, channels first; the direct kernel writes it
    itself, the others through a conversion step): the step writing it is not bound; the others are."""
    monkeypatch.setenv("NNHAL_CPU_POOL", "1")
    model = chain(kind, act=None, out_conv=True)
    x = feed(model)
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        first = s.run(x)[0]
        assert {"op0", "op1"} <= bound_nodes(s)
        (plan,) = plans(s)
        writers = [k for k, st in enumerate(plan.steps) if "y" in st.node.outputs]
        assert writers and not {k for c in plan.chunks for k, _ in c.binds} & set(writers)
        second = s.run(x)[0]
    assert first is not second
    np.testing.assert_array_equal(first, second)
    ref = ort_run(model, x)
    np.testing.assert_allclose(first, ref, **tolerance(kind, ref))


def test_a_declined_bind_runs_the_plain_kernel(monkeypatch):
    """A conv kernel whose bind returns None runs its plain run on the fixed arrays (straight._unbound)."""
    monkeypatch.setenv("NNHAL_CPU_POOL", "1")
    model = chain("im2col")
    x = feed(model)
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        s.run(x)
        (plan,) = plans(s)
        unbind(plan)
        for st in plan.steps:
            if st.node.op_type == "Conv":
                st.run.bind = lambda inputs, outputs: None
        got = s.run(x)[0]
        assert {"op0", "op1", "op2"} <= {name.split("/")[0] for name in declined(s)}
    ref = ort_run(model, x)
    np.testing.assert_allclose(got, ref, **tolerance("im2col", ref))


def test_a_non_contiguous_input_declines():
    """A bind handed an operand the native call cannot read in place (a strided view) declines: a copy made at bind
    time would be a stale snapshot."""
    model = chain("direct")
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        s.run(feed(model))
        (plan,) = plans(s)
        (k,) = [k for k, st in enumerate(plan.steps) if st.node.name.split("/")[0] == "op1"]
        step = plan.steps[k]
        buffers = plan.take()
        x = buffers.per_step[k - 1][0] if buffers.per_step[k - 1] else None
        y = buffers.per_step[k][0]
        plan.pool.append(buffers)
        wide = np.empty(y.shape[:-1] + (2 * y.shape[-1],), np.float32)
        assert step.run.bind([wide[..., ::2], None], [y]) is None
        if x is not None and x.shape == y.shape:
            assert step.run.bind([x, None], [y]) is not None


def _broken_call(inputs, outputs, *scratch):
    def call():
        raise ValueError("bound call broke")
    return call


def _broken_bind(inputs, outputs, *scratch):
    raise ValueError("cannot bind")


@pytest.mark.parametrize("kind", ["direct", "winograd"])
@pytest.mark.parametrize("broken,match", [(_broken_call, "op1"), (_broken_bind, "op1.*binding")])
def test_a_failing_bound_conv_names_its_node(monkeypatch, kind, broken, match):
    monkeypatch.setenv("NNHAL_CPU_POOL", "1")
    model = chain(kind)
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        s.run(feed(model))
        (plan,) = plans(s)
        unbind(plan)
        (step,) = [st for st in plan.steps if st.node.name.split("/")[0] == "op1"]
        step.run.bind = broken
        with pytest.raises(nnhal.NnhalError, match=match):
            s.run(feed(model))


def test_set_scratch_arrays_are_aligned_and_disjoint():
    scratch = straight.SetScratch()
    a, b = scratch.arrays(((3, 5), np.float32), ((7,), np.float64))
    assert a.shape == (3, 5) and b.shape == (7,) and b.dtype == np.float64
    assert a.__array_interface__["data"][0] % 64 == 0 and b.__array_interface__["data"][0] % 64 == 0
    assert not np.shares_memory(a, b)
    (big,) = scratch.arrays(((1 << 16,), np.float32))         # a larger request: a new buffer, the old views kept
    assert big.size == 1 << 16 and not np.shares_memory(big, a)


def neck_model(mode: str):
    """An FPN-style merge: a coarse map's conv upsampled by Resize (``mode``), concatenated with a lateral conv's map
    and with the upsampled map again (that copy the Concat makes: one tensor cannot be placed twice), then a conv."""
    c = 16
    inits = [_weights("wa", c, c, 3), _bias("ba", c), _weights("wb", c, c, 3), _bias("bb", c),
             _weights("wc", c, 3 * c, 3), numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")]
    nodes = [helper.make_node("Relu", ["x1"], ["h1"], name="relu1"),
             helper.make_node("Relu", ["x2"], ["h2"], name="relu2"),
             helper.make_node("Conv", ["h1", "wa", "ba"], ["a"], name="conv_a", kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Resize", ["a", "", "scales"], ["up"], name="up", mode=mode),
             helper.make_node("Conv", ["h2", "wb", "bb"], ["lat"], name="conv_b", kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Concat", ["up", "lat", "up"], ["cat"], name="cat", axis=1),
             helper.make_node("Conv", ["cat", "wc"], ["q"], name="conv_c", kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Neg", ["q"], ["y"], name="neg_out")]
    return make_model(nodes, [vinfo("x1", [1, c, 8, 8]), vinfo("x2", [1, c, 16, 16])], [vinfo("y", [1, c, 16, 16])],
                      inits)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_a_bound_upsample_and_concat_neck(monkeypatch, mode):
    """Resize (native, channels last) and the Concat's copy are bound; new inputs each run are read where they lie:
    every run equals onnxruntime on its own inputs."""
    monkeypatch.setenv("NNHAL_CPU_POOL", "1")
    model = neck_model(mode)
    rng = np.random.default_rng(5)
    feeds = [{"x1": rng.standard_normal((1, 16, 8, 8)).astype(np.float32),
              "x2": rng.standard_normal((1, 16, 16, 16)).astype(np.float32)} for _ in range(3)]
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = [s.run(f)[0] for f in feeds]
        assert {"up", "cat", "conv_a", "conv_b"} <= bound_nodes(s)
        assert not set(declined(s)) & {"up", "cat"}
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for f, g in zip(feeds, got):
        want = ref.run(None, f)[0]
        # two float32 convolutions of 144 and 432 unit-scale products and a bilinear blend: a few ulps of the scale
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=3e-5 * float(np.abs(want).max()))


def test_a_bound_residual_block(monkeypatch):
    """A ResNet basic block: conv + Relu, conv, the residual Add + Relu (one native pass, bound between the bound
    convolutions), a conv after; each run's new input read where it lies."""
    monkeypatch.setenv("NNHAL_CPU_POOL", "1")
    c = 32
    inits = [_weights("w0", c, c, 3), _weights("wa", c, c, 3), _bias("ba", c), _weights("wb", c, c, 3),
             _bias("bb", c), _weights("wc", c, c, 3), _weights("wd", c, c, 3)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["h0"], name="conv_0", kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["h0"], ["h"], name="relu_0"),
             helper.make_node("Conv", ["h", "wa", "ba"], ["a"], name="conv_a", kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["a"], ["ar"], name="relu_a"),
             helper.make_node("Conv", ["ar", "wb", "bb"], ["b"], name="conv_b", kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Add", ["b", "h"], ["s"], name="residual"),
             helper.make_node("Relu", ["s"], ["r"], name="relu_s"),
             helper.make_node("Conv", ["r", "wc"], ["q"], name="conv_c", kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["q"], ["qr"], name="relu_c"),
             helper.make_node("Conv", ["qr", "wd"], ["z"], name="conv_d", kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Neg", ["z"], ["y"], name="neg_out")]
    model = make_model(nodes, [vinfo("x", [1, c, 14, 14])], [vinfo("y", [1, c, 14, 14])], inits)
    feeds = [feed(model, seed) for seed in range(3)]
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = [s.run(f)[0] for f in feeds]
        assert {"conv_a", "conv_b", "residual", "conv_c"} <= bound_nodes(s)
        assert not declined(s)
    for f, g in zip(feeds, got):
        ref = ort_run(model, f)
        np.testing.assert_allclose(g, ref, rtol=1e-4, atol=3e-5 * float(np.abs(ref).max()))
