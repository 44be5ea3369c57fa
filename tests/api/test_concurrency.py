"""One prepared Session run from many threads: every output equals the single-thread output.

Each model is run from 8 threads x 25 runs, every thread with its own inputs,
so a run that read another run's tensors (a shared arena, a shared value
store) gives a wrong output and fails. Devices that are not reentrant (vnpu)
are serialised by the core, and only they.
"""
from __future__ import annotations

import threading
from importlib import resources

import numpy as np
import pytest

import nnhal
from nnhal.models.bert import bert_inputs, build_bert
from nnhal.zoo import input_for, resolve

THREADS, RUNS = 8, 25


def in_threads(work, count: int) -> None:
    """Run ``work(k)`` for k in range(count) on ``count`` threads started together; the first error any
    thread raised is raised here."""
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def body(k: int) -> None:
        try:
            start.wait()
            work(k)
        except BaseException as exc:  # re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _hammer(session: nnhal.Session, feeds: list[dict[str, np.ndarray]]) -> None:
    """Each thread runs its own feeds RUNS times; every output must equal the single-thread one exactly."""
    expected = [[o.copy() for o in session.run(f)] for f in feeds]

    def work(k: int) -> None:
        for _ in range(RUNS):
            got = session.run(feeds[k])
            for g, e in zip(got, expected[k]):
                np.testing.assert_array_equal(g, e)

    in_threads(work, len(feeds))


def _digits_path() -> str:
    return str(resources.files("nnhal.data").joinpath("digits_cnn.onnx"))


@pytest.mark.parametrize("spec", ["digits", "zoo:squeezenet?weights=random", "bert"])
def test_threads_share_one_session(spec):
    if spec == "digits":
        model = _digits_path()
        feeds = [{"input": np.random.default_rng(k).random((4, 1, 8, 8), dtype=np.float32)} for k in range(THREADS)]
        import onnx
        name = onnx.load(model).graph.input[0].name
        feeds = [{name: f["input"]} for f in feeds]
    elif spec == "bert":
        model = build_bert(layers=2, hidden=64, heads=4, seq=None, vocab=500, seed=3)
        feeds = [bert_inputs(2, 16, vocab=500, seed=k) for k in range(THREADS)]
    else:
        model = resolve(spec)
        feeds = [input_for(model, seed=k) for k in range(THREADS)]
    with nnhal.Session(model, num_thread=1) as s:
        _hammer(s, feeds)


def test_threads_on_a_quantized_vnpu_session():
    """[vnpu, cpu] uint8: vnpu is not reentrant, so the core serialises it; the cpu parts run concurrently."""
    model = _digits_path()
    import onnx
    name = onnx.load(model).graph.input[0].name
    rng = np.random.default_rng(0)
    calib = rng.random((16, 1, 8, 8), dtype=np.float32)
    with nnhal.Session(model, devices=["vnpu", "cpu"], precision="uint8") as s:
        s.run({name: calib})          # calibrates on these and prepares
        assert any(sg.device == "vnpu" for sg in s.subgraphs)
        feeds = [{name: calib[k:k + 1].repeat(16, axis=0) * (1 + k / 8)} for k in range(THREADS)]
        _hammer(s, feeds)


def test_threads_with_different_batch_sizes():
    """Each batch size prepares the graph again (under the write lock); no run sees a torn graph."""
    model = _digits_path()
    import onnx
    name = onnx.load(model).graph.input[0].name
    feeds = [{name: np.random.default_rng(k).random((1 + k % 3, 1, 8, 8), dtype=np.float32)} for k in range(4)]
    with nnhal.Session(model, num_thread=1) as s:
        _hammer(s, feeds)
