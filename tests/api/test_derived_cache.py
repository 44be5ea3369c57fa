"""The values prepare derives from the weights alone (nnhal.graph.derived: the CPU GEMM's packed panels, merged
projection weights) are made once per graph handle and shared by every prepared input shape.

The oracle for a re-prepared entry is a cold prepare of the same shape in a fresh Session: with the same
kernels and the same summation order its outputs must be equal bit for bit. Decoders with a symbolic past
length (tests/device/cpu/kv_decoders.py) re-prepare at every length, as a decode loop does.
"""
from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import nnhal
from nnhal.errors import NnhalError
from nnhal.graph.derived import DerivedCache, derive, deriving
from tests.api.test_concurrency import in_threads

pytest.importorskip("torch")

LENGTHS = (3, 4, 7, 5, 12, 9)


@functools.lru_cache(maxsize=None)
def _decoder(llama: bool) -> tuple[bytes, dict]:
    from tests.device.cpu import kv_decoders

    return kv_decoders.export(llama=llama, d=64, heads=4, layers=2, past=4, dynamic=True)


def _feeds(llama: bool, past: int) -> dict[str, np.ndarray]:
    _, base = _decoder(llama)
    rng = np.random.default_rng(past)
    feeds = dict(base)
    for name in feeds:
        if name.startswith("past"):
            feeds[name] = rng.standard_normal((1, 4, past, 16)).astype(np.float32)
    feeds["position"] = np.full((1, 1), past, np.int64)
    return feeds


def _cold(model, feeds, precision="fp32") -> list[np.ndarray]:
    with nnhal.Session(model, precision=precision) as s:
        return s.run(feeds)


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
@pytest.mark.parametrize("llama", [False, True], ids=["gpt2", "llama"])
def test_reprepared_entries_equal_cold_prepares(llama, precision):
    model, _ = _decoder(llama)
    with nnhal.Session(model, precision=precision, shape_cache=3) as s:
        for past in LENGTHS:
            feeds = _feeds(llama, past)
            _same(s.run(feeds), _cold(model, feeds, precision))
        assert s.graph.derived.hits > 0     # the later prepares found what the first derived


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_packed_weights_shared_between_entries_and_freed_on_close(precision):
    model, _ = _decoder(True)
    s = nnhal.Session(model, precision=precision)
    s.run(_feeds(True, 3))
    cache = s.graph.derived
    items, misses = len(cache), cache.misses
    assert items > 0
    s.run(_feeds(True, 4))
    assert len(cache) == items and cache.misses == misses     # nothing derived anew for the second length
    first, second = (entry.prepared.graph for entry in s.graph.entries.values())
    merged = [n for n, t in first.tensors.items() if "__merged_weight" in n and t.value is not None]
    assert merged
    for name in merged:
        assert first.tensors[name].value is second.tensors[name].value
    s.close()
    assert len(cache) == 0


def test_eviction_keeps_only_what_live_entries_use():
    model, _ = _decoder(False)
    with nnhal.Session(model, shape_cache=2) as s:
        for past in LENGTHS:
            feeds = _feeds(False, past)
            _same(s.run(feeds), _cold(model, feeds))
            assert len(s.graph.entries) <= 2
        items = len(s.graph.derived)
        for token in [e.token for e in s.graph.entries.values()]:
            assert all(token in item[2] for item in s.graph.derived._items.values())
        assert items > 0


def test_two_threads_run_different_lengths():
    model, _ = _decoder(True)
    lengths = [(3, 5, 8, 11), (4, 6, 9, 10)]
    expected = {p: _cold(model, _feeds(True, p)) for ls in lengths for p in ls}
    with nnhal.Session(model, shape_cache=3) as s:
        def work(k: int) -> None:
            for _ in range(2):
                for p in lengths[k]:
                    _same(s.run(_feeds(True, p)), expected[p])

        in_threads(work, 2)


def _two_matmuls(shared: bool) -> onnx.ModelProto:
    """y = (x @ W1) @ W2 with x: [N, 8]; W2 is W1 itself (one initializer read twice) or another matrix of the
    same shape and dtype."""
    rng = np.random.default_rng(1)
    w1 = rng.standard_normal((8, 8)).astype(np.float32)
    inits = [onnx.numpy_helper.from_array(w1, "W1")]
    if not shared:
        inits.append(onnx.numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "W2"))
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"], name="mm1"),
             helper.make_node("MatMul", ["h", "W1" if shared else "W2"], ["y"], name="mm2")]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("shared", [False, True], ids=["distinct", "shared"])
def test_weights_not_conflated(shared):
    model = _two_matmuls(shared)
    w = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    w2 = w["W1"] if shared else w["W2"]
    with nnhal.Session(model) as s:
        for n in (1, 2, 5, 1, 33):
            x = np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)
            want = (x.astype(np.float64) @ w["W1"]) @ w2
            # two float32 products of depth 8: |error| <= 2 * 8 eps * (|x| |W1|) |W2| (generous)
            bound = 16 * np.finfo(np.float32).eps * (np.abs(x) @ np.abs(w["W1"])) @ np.abs(w2)
            y = s.run({"x": x})[0]
            assert np.all(np.abs(y - want) <= bound + 1e-6)
            _same([y], _cold(model, {"x": x}))


def test_failed_prepare_is_typed_and_releases_its_items():
    model, _ = _decoder(True)
    with nnhal.Session(model) as s:
        s.run(_feeds(True, 3))
        items = len(s.graph.derived)
        bad = _feeds(True, 4)
        bad["past_0"] = bad["past_0"][:, :, :, :8]       # head size 8 against the weights' 16
        with pytest.raises(NnhalError):
            s.run(bad)
        assert len(s.graph.derived) == items
        _same(s.run(_feeds(True, 5)), _cold(model, _feeds(True, 5)))


def test_cache_release_drops_only_unused_items():
    cache = DerivedCache()
    a, b = np.arange(4.0), np.arange(4.0)           # equal contents, distinct arrays: distinct items
    t1, t2 = object(), object()
    with deriving(cache, t1):
        x = derive("double", (a,), None, lambda: a * 2)
        assert derive("double", (a,), None, lambda: a * 3) is x
        derive("double", (b,), None, lambda: b * 2)
    with deriving(cache, t2):
        assert derive("double", (a,), None, lambda: a * 5) is x
        assert derive("double", (a,), 1, lambda: a * 5) is not x      # other parameters, another item
    assert len(cache) == 3
    cache.release(t1)
    assert len(cache) == 2                           # b's item was t1's alone
    cache.release(t2)
    assert len(cache) == 0
    assert derive("double", (a,), None, lambda: a * 7)[1] == 7        # no cache active: made each time
