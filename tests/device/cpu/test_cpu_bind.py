"""Bound steps of the CPU plan (device/cpu/straight.py bind): a kernel's ``bind`` on a buffer set's fixed views
against its plain run, the interpreting loop and onnxruntime; per-set and per-thread-split binding."""
from __future__ import annotations

import threading
from functools import partial

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import nnhal
from tests.conftest import make_model, vinfo

RNG = np.random.default_rng(7)


def _const(name: str, shape, scale: float = 0.1):
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def chain(kind: str, n: int = 3, rows: int = 1, width: int = 64):
    """x -> Neg -> n nodes of ``kind`` -> Neg -> y: the middle nodes read and write planned buffers (bindable), the
    first Neg reads the graph input and the last writes the graph output."""
    nodes, inits, prev = [helper.make_node("Neg", ["x"], ["h"], name="neg_in")], [], "h"
    shape = [rows, width]
    for i in range(n):
        out = f"t{i}"
        if kind == "softmax":
            nodes.append(helper.make_node("Softmax", [prev], [out], axis=-1, name=f"op{i}"))
        elif kind == "softmax_mid":
            shape = [1, 4, 16, rows]
            nodes.append(helper.make_node("Softmax", [prev], [out], axis=2, name=f"op{i}"))
        elif kind == "layernorm":
            inits += [_const(f"g{i}", [width], 1.0), _const(f"b{i}", [width])]
            nodes.append(helper.make_node("LayerNormalization", [prev, f"g{i}", f"b{i}"], [out], axis=-1,
                                          name=f"op{i}"))
        elif kind == "matmul":
            inits.append(_const(f"w{i}", [width, width]))
            nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [out], name=f"op{i}"))
        elif kind == "matmul_residual":      # MatMul + bias + residual add: the bound call's epilogue pass
            inits += [_const(f"w{i}", [width, width]), _const(f"c{i}", [width])]
            nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"p{i}"], name=f"op{i}"),
                      helper.make_node("Add", [f"p{i}", f"c{i}"], [f"q{i}"], name=f"bias{i}"),
                      helper.make_node("Add", [f"q{i}", prev], [out], name=f"res{i}")]
        elif kind == "softmax_reshape":     # a Softmax reading a static view (Reshape) of a planned buffer
            inits.append(numpy_helper.from_array(np.array([rows * 8, 8] if i % 2 == 0 else [rows, 64]), f"s{i}"))
            nodes += [helper.make_node("Reshape", [prev, f"s{i}"], [f"v{i}"], name=f"view{i}"),
                      helper.make_node("Softmax", [f"v{i}"], [out], axis=-1, name=f"op{i}")]
        elif kind == "transpose":
            # a Neg between (the optimizer folds Transpose pairs)
            nodes += [helper.make_node("Transpose", [prev], [f"p{i}"], perm=[1, 0], name=f"op{i}"),
                      helper.make_node("Neg", [f"p{i}"], [out], name=f"neg{i}")]
        elif kind == "gather":
            inits.append(numpy_helper.from_array(RNG.permutation(width).astype(np.int64), f"i{i}"))
            nodes += [helper.make_node("Gather", [prev, f"i{i}"], [f"p{i}"], axis=1, name=f"op{i}"),
                      helper.make_node("Neg", [f"p{i}"], [out], name=f"neg{i}")]
        elif kind == "shuffle":             # a channel shuffle by Gather: the native shuffle_last
            idx = np.arange(width).reshape(4, width // 4).T.reshape(-1)
            inits.append(numpy_helper.from_array(idx.astype(np.int64), f"i{i}"))
            nodes += [helper.make_node("Gather", [prev, f"i{i}"], [f"p{i}"], axis=1, name=f"op{i}"),
                      helper.make_node("Neg", [f"p{i}"], [out], name=f"neg{i}")]
        elif kind == "gelu":                # the Erf form, which the plan fuses into one Gelu step
            inits += [numpy_helper.from_array(np.array(v, np.float32), f"{c}{i}")
                      for c, v in (("r", np.sqrt(2.0)), ("one", 1.0), ("half", 0.5))]
            nodes += [helper.make_node("Div", [prev, f"r{i}"], [f"d{i}"], name=f"op{i}"),
                      helper.make_node("Erf", [f"d{i}"], [f"e{i}"]),
                      helper.make_node("Add", [f"e{i}", f"one{i}"], [f"a{i}"]),
                      helper.make_node("Mul", [prev, f"a{i}"], [f"m{i}"]),
                      helper.make_node("Mul", [f"m{i}", f"half{i}"], [out])]
        elif kind == "gemm_relu":
            inits += [_const(f"w{i}", [width, width]), _const(f"c{i}", [width])]
            nodes += [helper.make_node("Gemm", [prev, f"w{i}", f"c{i}"], [f"p{i}"], transB=1, name=f"op{i}"),
                      helper.make_node("Relu", [f"p{i}"], [out], name=f"relu{i}")]
        prev = out
    if kind == "softmax_reshape" and n % 2:
        inits.append(numpy_helper.from_array(np.array([rows, 64]), "s_out"))
        nodes.append(helper.make_node("Reshape", [prev, "s_out"], ["back"], name="view_out"))
        prev = "back"
    nodes.append(helper.make_node("Neg", [prev], ["y"], name="neg_out"))
    return make_model(nodes, [vinfo("x", shape)], [vinfo("y", shape)], inits)


CASES = [("softmax", 1), ("softmax", 5), ("softmax_mid", 8), ("softmax_reshape", 2), ("transpose", 64),
         ("gather", 3), ("shuffle", 2), ("gelu", 1), ("gelu", 40), ("layernorm", 1), ("layernorm", 6), ("matmul", 1),
         ("matmul", 2), ("matmul", 40), ("matmul_residual", 1), ("matmul_residual", 40), ("gemm_relu", 1),
         ("gemm_relu", 40)]


def plans(session):
    return [sg.device_graph for sg in session.graph.execution.subgraphs if sg.device == "cpu"]


def bound_nodes(session) -> set[str]:
    """The names of the bound steps' nodes (a fused node's: its first node's, before a "/")."""
    return {p.steps[k].node.name.split("/")[0] for p in plans(session) for c in p.chunks for k, _ in c.binds}


def concurrently(session, feeds: list[dict], runs: int) -> list[list]:
    """Output 0 of ``runs`` runs of ``session`` on each of ``feeds``, one thread per feed, all at once."""
    got: list[list] = [[] for _ in feeds]
    start = threading.Barrier(len(feeds))

    def worker(t: int) -> None:
        start.wait()
        for _ in range(runs):
            got[t].append(session.run(feeds[t])[0])

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(len(feeds))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(len(g) == runs for g in got)     # a thread that failed stopped early
    return got


def two_sets_concurrently(session, feeds: list[dict], runs: int) -> list:
    """Runs ``session`` from one thread per feed at once (``runs`` each) while one buffer set is held, so at least two
    sets are laid out and bound; checks every result equals the single-threaded run of its feed; the bound sets."""
    want = [session.run(f)[0] for f in feeds]
    (plan,) = plans(session)
    held = plan.take()              # hold one set: the runs below lay out and bind another
    got = concurrently(session, feeds, runs)
    plan.pool.append(held)
    sets = [b for b in plan.pool if b.bound]
    assert len(sets) >= 2
    for t in range(len(feeds)):
        for r in got[t]:
            np.testing.assert_array_equal(r, want[t])
    return sets


def declined(session) -> list[str]:
    """The bound steps whose kernel's bind declined on some buffer set (their plain run is called instead)."""
    return [p.steps[k].node.name for p in plans(session) for b in p.pool for calls in b.bound.values()
            for k, call in enumerate(calls) if call is not None and "_unbound" in getattr(call, "__qualname__", "")]


def unbind(plan) -> None:
    """Drop every buffer set's bound calls: the next run binds again."""
    for buffers in plan.pool:
        buffers.bound.clear()


def feed(model, seed: int = 0) -> dict:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def ort_run(model, x) -> np.ndarray:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, x)[0]


@pytest.mark.parametrize("pool", ["0", "1"])
@pytest.mark.parametrize("kind,rows", CASES)
def test_bound_steps_equal_the_plain_run_and_onnxruntime(monkeypatch, kind, rows, pool):
    monkeypatch.setenv("NNHAL_CPU_POOL", pool)        # pool on: the native splits (gemm_split) are bound
    model = chain(kind, rows=rows)
    x = feed(model)
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        fast = s.run(x)[0]
        again = s.run(x)[0]
        assert {"op0", "op1"} <= bound_nodes(s)      # the middle steps are bound
        assert "neg_out" not in bound_nodes(s)
        # and their kernels bound them (no plain run behind), but for a product of more than a few rows with the
        # pools off, which the plain run hands to numpy (BLAS's own threads): its bind declines
        product = kind in ("matmul", "matmul_residual", "gemm_relu") and rows > 2 and pool == "0"
        assert bool(declined(s)) == product
    monkeypatch.setenv("NNHAL_CHECK", "1")            # the interpreting loop: every kernel's plain run
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        plain = s.run(x)[0]
    np.testing.assert_array_equal(fast, again)
    # the bound call is the plain run's native call on the same operands and split: the same arithmetic
    np.testing.assert_allclose(fast, plain, rtol=1e-6, atol=1e-7)
    # float32 products of 64 terms, three nodes deep: a few ulps of the outputs' size
    np.testing.assert_allclose(fast, ort_run(model, x), rtol=1e-4, atol=1e-5)


def test_two_threads_on_one_session_get_their_own_bound_views(monkeypatch):
    """Two threads run one Session on different inputs at once: each run takes its own buffer set, bound on its
    own views; every result equals the single-threaded run of its input."""
    monkeypatch.setenv("NNHAL_CPU_POOL", "1")
    model = chain("layernorm", n=6, rows=6)
    feeds = [feed(model, seed) for seed in range(2)]
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        sets = two_sets_concurrently(s, feeds, 200)
        # no set's bound calls read or write another set's arena
        for mine in sets:
            for other in sets:
                if other is mine:
                    continue
                for calls in mine.bound.values():
                    for call in calls:
                        if isinstance(call, partial):
                            for arg in call.args:
                                if isinstance(arg, np.ndarray):
                                    assert not np.shares_memory(arg, other.arena)


def two_then_one_thread(model, x: dict) -> tuple[np.ndarray, np.ndarray]:
    """Output 0 of ``model`` on ``x`` at 2 threads, then at 1 in the same Session; checks both splits were bound."""
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        two = s.run(x)[0]
        # the thread count the plan runs on (Options.num_thread as prerun recorded it) changes: the pool resizes
        for sg in s.graph.execution.subgraphs:
            sg.stats["num_thread"] = 1
        one = s.run(x)[0]
        (plan,) = plans(s)
        keys = {key for b in plan.pool for key in b.bound}
        assert {(True, 1), (True, 2)} <= keys
    return two, one


def test_a_thread_count_change_rebinds(monkeypatch):
    monkeypatch.setenv("NNHAL_CPU_POOL", "1")
    model = chain("matmul", rows=40)
    x = feed(model)
    two, one = two_then_one_thread(model, x)
    np.testing.assert_allclose(one, two, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(one, ort_run(model, x), rtol=1e-4, atol=1e-5)


def test_a_step_writing_a_graph_output_keeps_its_plain_run():
    """A Softmax whose output is a graph output (allocated per run) and also read by the next step is not bound;
    the step after it reads it per run, so it is not bound either."""
    nodes = [helper.make_node("Neg", ["x"], ["h"], name="neg"),
             helper.make_node("Softmax", ["h"], ["s"], axis=-1, name="sm_out"),
             helper.make_node("Softmax", ["s"], ["y"], axis=-1, name="sm_after")]
    model = make_model(nodes, [vinfo("x", [2, 64])], [vinfo("s", [2, 64]), vinfo("y", [2, 64])])
    x = feed(model)
    with nnhal.Session(model, devices=["cpu"]) as s:
        first, y = s.run(x)
        assert not bound_nodes(s) & {"sm_out", "sm_after"}
        again, _ = s.run(x)
    assert first is not again
    e = np.exp(-x["x"] - (-x["x"]).max(-1, keepdims=True))
    want = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(first, want, rtol=1e-6, atol=1e-7)
    e = np.exp(want - want.max(-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-6, atol=1e-7)


def _broken_call(inputs, outputs):
    def call():
        raise ValueError("bound call broke")
    return call


def _broken_bind(inputs, outputs):
    raise ValueError("cannot bind")


@pytest.mark.parametrize("kind,broken,match", [("softmax", _broken_call, "op1"),
                                               ("layernorm", _broken_bind, "op1.*binding")])
def test_a_failing_bound_step_names_its_node(kind, broken, match):
    """A bound call that raises is reported with its node (its generated line), and so is a failing bind."""
    model = chain(kind)
    with nnhal.Session(model, devices=["cpu"]) as s:
        s.run(feed(model))
        (plan,) = plans(s)
        unbind(plan)
        (step,) = [st for st in plan.steps if st.node.name == "op1"]
        step.run.bind = broken
        with pytest.raises(nnhal.NnhalError, match=match):
            s.run(feed(model))


def test_a_declined_bind_runs_the_plain_kernel(monkeypatch):
    """A kernel whose bind returns None runs its plain run on the fixed arrays (straight._unbound)."""
    model = chain("matmul", rows=3)
    x = feed(model)
    with nnhal.Session(model, devices=["cpu"]) as s:
        s.run(x)
        for plan in plans(s):
            unbind(plan)
            for st in plan.steps:
                if getattr(st.run, "bind", None) is not None:
                    st.run.bind = lambda inputs, outputs: None
        got = s.run(x)[0]
    np.testing.assert_allclose(got, ort_run(model, x), rtol=1e-4, atol=1e-5)


def encoder_model(layers: int = 2):
    """torch TransformerEncoderLayers (d_model 64, 4 heads), seeded, exported at opset 17 on (1, 16, 64)."""
    import io

    import onnx
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    module = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()
    buf = io.BytesIO()
    torch.onnx.export(module, (torch.randn(1, 16, 64),), buf, opset_version=17, dynamo=False,
                      input_names=["x"], output_names=["y"])
    return onnx.load_from_string(buf.getvalue())


@pytest.mark.parametrize("pool", ["0", "1"])
def test_a_bound_encoder_matches_onnxruntime_and_concurrent_runs(monkeypatch, pool):
    """A transformer encoder: its attention step, products and norms bound (through the head-split views); its
    results equal the plain run's and onnxruntime's, also from two threads on different inputs at once."""
    monkeypatch.setenv("NNHAL_CPU_POOL", pool)
    model = encoder_model()
    feeds = [{"x": np.random.default_rng(seed).standard_normal((1, 16, 64)).astype(np.float32)} for seed in range(2)]
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        want = [s.run(f)[0] for f in feeds]
        kinds = {p.steps[k].node.op_type for p in plans(s) for c in p.chunks for k, _ in c.binds}
        assert {"FusedAttention", "LayerNormalization", "MatMul"} <= kinds
        got = concurrently(s, feeds, 50)
    for t in range(2):
        for r in got[t]:
            np.testing.assert_array_equal(r, want[t])
    monkeypatch.setenv("NNHAL_CHECK", "1")
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        plain = [s.run(f)[0] for f in feeds]
    for f, w, p in zip(feeds, want, plain):
        np.testing.assert_allclose(w, p, rtol=1e-5, atol=1e-6)
        # two float32 layers of 64-term products and softmaxes: a few ulps of unit-scale outputs
        np.testing.assert_allclose(w, ort_run(model, f), rtol=1e-4, atol=1e-4)


def test_a_bound_attention_reads_its_run_time_mask_each_run():
    """The fused attention bound to a mask computed in the graph (a planned buffer): each run's mask values are
    read where they lie (a copy made at bind time would keep the first run's)."""
    import io

    import onnx
    torch = pytest.importorskip("torch")

    class Masked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.att = torch.nn.MultiheadAttention(64, 4, batch_first=True)

        def forward(self, x, m):
            return self.att(x, x, x, attn_mask=m * 4.0 - 2.0, need_weights=False)[0]

    torch.manual_seed(0)
    buf = io.BytesIO()
    torch.onnx.export(Masked().eval(), (torch.randn(1, 16, 64), torch.rand(16, 16)), buf, opset_version=17,
                      dynamo=False, input_names=["x", "m"], output_names=["y"])
    model = onnx.load_from_string(buf.getvalue())
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 16, 64)).astype(np.float32)
    feeds = [{"x": x, "m": rng.random((16, 16)).astype(np.float32)} for _ in range(3)]
    with nnhal.Session(model, devices=["cpu"], num_thread=2) as s:
        got = [s.run(f)[0] for f in feeds]
        kinds = {p.steps[k].node.op_type for p in plans(s) for c in p.chunks for k, _ in c.binds}
        assert "FusedAttention" in kinds
    for f, g in zip(feeds, got):
        # float32 scores of 16-term products, softmax rows of 16: a few ulps of unit-scale outputs
        np.testing.assert_allclose(g, ort_run(model, f), rtol=1e-4, atol=1e-5)
