"""A Session keeps up to Options.shape_cache prepared input shapes (issue 27): runs of cached shapes do not
prepare again, a new shape evicts the least recently used one, and every entry is released on close.

The oracle is onnxruntime on a model with a dynamic batch axis built here; prepares are counted through
the debug log record _prerun_locked writes for each prepare (never through timing).
"""
from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import nnhal
from nnhal import api
from tests.api.test_concurrency import in_threads

ort = pytest.importorskip("onnxruntime")

PREPARED = "prepared the graph for input shapes"


def _model() -> onnx.ModelProto:
    """y = softmax(relu(x @ W + b)), x: [N, 8] with N dynamic; s = sum of y over the batch (shape-dependent)."""
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.standard_normal((8, 5)).astype(np.float32), "W")
    b = onnx.numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "b")
    axes = onnx.numpy_helper.from_array(np.array([0], np.int64), "axes")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=1),
             helper.make_node("ReduceSum", ["y", "axes"], ["s"], name="sum", keepdims=1)]
    graph = helper.make_graph(nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5]),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 5])], [w, b, axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return _model()


@pytest.fixture(scope="module")
def oracle(model):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return lambda x: sess.run(None, {"x": x})


def _x(rows: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed + rows).standard_normal((rows, 8)).astype(np.float32)


def _close(got, expected) -> None:
    # fp32 MatMul of 8 terms, softmax and a sum over <= 7 rows: a few ulps of values <= 7
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


class _Prepares(logging.Handler):
    """Counts the prepares of the graph (the debug record of each)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(PREPARED):
            self.count += 1


@pytest.fixture
def prepares():
    logger = logging.getLogger("nnhal")
    handler, level = _Prepares(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def _released(entry: api.ShapeEntry) -> bool:
    return not entry.live and all(sg.device_graph is None for sg in entry.prepared.execution.subgraphs)


def test_alternating_shapes_match_onnxruntime_and_prepare_once_each(model, oracle, prepares):
    with nnhal.Session(model, devices=["cpu"]) as s:
        for rows in (2, 3, 2, 3, 5, 2, 5, 3):
            x = _x(rows)
            _close(s.run({"x": x}), oracle(x))
        assert prepares.count == 3            # 2, 3 and 5 rows: once each
        assert len(s.graph.entries) == 3
        assert s.graph.prepared_shapes == {"x": (5, 8)}      # the report describes the shapes prepared last
        assert s.report() is not None


def test_the_bound_evicts_the_least_recently_used_and_releases_it(model, oracle, prepares):
    with nnhal.Session(model, devices=["cpu"], shape_cache=2) as s:
        s.run({"x": _x(2)})
        s.run({"x": _x(3)})
        first = s.graph.entries[((2, 8),)]
        s.run({"x": _x(2)})                   # 2 rows most recently used: 3 rows go next
        assert prepares.count == 2
        s.run({"x": _x(4)})
        assert prepares.count == 3
        assert list(s.graph.entries) == [((2, 8),), ((4, 8),)]
        assert s.graph.entries[((2, 8),)] is first and first.live
        x = _x(3)
        _close(s.run({"x": x}), oracle(x))    # prepared again: it was evicted
        assert prepares.count == 4
        assert list(s.graph.entries) == [((4, 8),), ((3, 8),)]
        assert _released(first)


def test_a_bound_of_one_prepares_every_change_as_before(model, oracle, prepares):
    with nnhal.Session(model, devices=["cpu"], shape_cache=1) as s:
        for rows in (2, 3, 2):
            x = _x(rows)
            _close(s.run({"x": x}), oracle(x))
        assert prepares.count == 3
        assert len(s.graph.entries) == 1


@pytest.mark.parametrize("bound", [4, 1])
def test_four_threads_two_shapes_match_onnxruntime(model, oracle, prepares, bound):
    """With a bound of 1 the two shapes evict each other on every change: each run still ends (the first
    run of a new shape runs under the write lock that prepared it) and matches."""
    feeds = [_x(2, seed) if k % 2 == 0 else _x(6, seed) for k, seed in enumerate(range(4))]
    expected = [oracle(x) for x in feeds]
    with nnhal.Session(model, devices=["cpu"], shape_cache=bound) as s:

        def work(k: int) -> None:
            for _ in range(25):
                _close(s.run({"x": feeds[k]}), expected[k])

        in_threads(work, 4)             # the first runs of both shapes race to prepare them
        assert prepares.count == 2 if bound > 1 else prepares.count >= 2
        assert len(s.graph.entries) == min(bound, 2)


def test_close_releases_every_entry(model):
    s = nnhal.Session(model, devices=["cpu"])
    for rows in (1, 2, 3):
        s.run({"x": _x(rows)})
    entries = list(s.graph.entries.values())
    assert len(entries) == 3 and all(e.live for e in entries)
    s.close()
    assert all(_released(e) for e in entries)
    assert not s.graph.entries


def test_c_style_api_uses_the_cache_and_prerun_prepares_anew(model, oracle, prepares):
    ctx = nnhal.create_context("shapes", devices=["cpu"])
    g = nnhal.create_graph(ctx, "onnx", model)
    try:
        outputs = []
        for rows in (2, 3, 2):
            x = _x(rows)
            nnhal.set_graph_input(g, "x", x)
            if rows == 2 and not g.entries:
                nnhal.prerun_graph(g, nnhal.Options())
            nnhal.run_graph(g)
            outputs.append(([nnhal.get_graph_output(g, i) for i in range(2)], oracle(x)))
        for got, expected in outputs:
            _close(got, expected)
        assert prepares.count == 2            # 2 rows selected again from the cache
        assert g.prepared_shapes == {"x": (2, 8)}
        old = list(g.entries.values())
        nnhal.prerun_graph(g, nnhal.Options())    # documented: prepares anew, with these options
        assert prepares.count == 3 and len(g.entries) == 1
        assert all(_released(e) for e in old)
    finally:
        nnhal.destroy_graph(g)


def test_postrun_then_run_prepares_again(model, oracle, prepares):
    with nnhal.Session(model, devices=["cpu"]) as s:
        s.run({"x": _x(2)})
        s.run({"x": _x(3)})
        nnhal.postrun_graph(s.graph)
        assert not any(e.live for e in s.graph.entries.values())
        x = _x(3)
        _close(s.run({"x": x}), oracle(x))
        assert prepares.count == 3 and len(s.graph.entries) == 1


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_shape_cache_must_be_a_positive_int(bad):
    with pytest.raises(nnhal.OptionsError, match="shape_cache"):
        nnhal.Options(shape_cache=bad)
