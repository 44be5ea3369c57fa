"""The feeds' checks derived once per model (graph/binding.py InputChecker): a ready array passes as it is,
everything else is converted or refused exactly as check_input does, with the same messages."""
from __future__ import annotations

import re
import threading

import numpy as np
import pytest
from onnx import helper

import nnhal
from nnhal.errors import InputError
from nnhal.graph.binding import InputChecker, check_input
from nnhal.scheduler.locks import ReadWriteLock
from tests.conftest import make_model, vinfo


def two_input_model(x_shape=(2, 4)):
    return make_model([helper.make_node("Add", ["x", "y"], ["z"], name="add")],
                      [vinfo("x", list(x_shape)), vinfo("y", [2, 4])], [vinfo("z", [2, 4])])


X = np.arange(8, dtype=np.float32).reshape(2, 4)
Y = np.full((2, 4), 0.5, np.float32)


def _checker(model) -> InputChecker:
    ctx = nnhal.create_context("feeds", devices=["cpu"])
    return nnhal.create_graph(ctx, "onnx", model).checker


def test_a_ready_array_is_taken_as_it_is():
    check = _checker(two_input_model())
    name, array = check("x", X)
    assert name == "x" and array is X


@pytest.mark.parametrize("value", [
    np.asfortranarray(np.arange(8, dtype=np.float32).reshape(2, 4)),     # not C-contiguous: copied
    np.arange(16, dtype=np.float32).reshape(2, 8)[:, ::2],               # strided view: copied
    [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]],                         # not an array at all (float64): refused
    np.arange(8, dtype=np.float32).reshape(2, 4).view(np.recarray),      # a subclass: the general path
])
def test_other_feeds_get_what_check_input_gives(value):
    model = two_input_model()
    check = _checker(model)
    graph = nnhal.create_graph(nnhal.create_context("feeds", devices=["cpu"]), "onnx", model).graph
    try:
        want = check_input(graph, "x", value)
    except InputError as exc:
        with pytest.raises(InputError, match=re.escape(str(exc))):
            check("x", value)
        return
    name, array = check("x", value)
    assert name == want[0] and type(array) is np.ndarray and array.flags.c_contiguous
    np.testing.assert_array_equal(array, want[1])


@pytest.mark.parametrize("feeds, error", [
    ({"x": X.astype(np.float64), "y": Y}, r"input 'x' expects dtype float32, got float64; convert it with "
                                          r"\.astype\(np\.float32\)"),
    ({"x": X.T.copy(), "y": Y}, r"input 'x' expects shape \[2x4\], got \[4, 2\]"),
    ({"x": X[:1], "y": Y}, r"input 'x' expects shape \[2x4\], got \[1, 4\]"),
    ({"x": X}, r"inputs not given: \['y'\] \(the graph's inputs: \['x', 'y'\]\)"),
    ({"x": X, "x2": Y}, "the graph has no input named 'x2'"),
    ({0: X, "x": X}, r"inputs not given: \['y'\]"),         # two keys for one input still miss the other
])
def test_bad_feeds_keep_their_messages(feeds, error):
    with nnhal.Session(two_input_model()) as s:
        with pytest.raises(InputError, match=error):
            s.run(feeds)
        np.testing.assert_array_equal(s.run({"x": X, "y": Y})[0], X + Y)   # the session still works


def test_non_contiguous_and_positional_feeds_give_the_same_outputs():
    with nnhal.Session(two_input_model()) as s:
        want = s.run({"x": X, "y": Y})[0]
        np.testing.assert_array_equal(s.run([np.asfortranarray(X), Y])[0], want)
        np.testing.assert_array_equal(s.run({1: Y, "x": X})[0], want)


def test_a_dynamic_dim_is_checked_on_the_general_path():
    model = make_model([helper.make_node("Relu", ["x"], ["z"], name="relu")], [vinfo("x", ["n", 4])],
                       [vinfo("z", ["n", 4])])
    with nnhal.Session(model) as s:
        np.testing.assert_array_equal(s.run({"x": -X})[0], np.zeros((2, 4), np.float32))
        np.testing.assert_array_equal(s.run({"x": X[:1]})[0], X[:1])       # another n: prepared again
        with pytest.raises(InputError, match=r"input 'x' expects shape \[\?x4\], got \[2, 3\]"):
            s.run({"x": X[:, :3].copy()})


def test_read_write_lock_keeps_writers_first_and_nesting():
    lock = ReadWriteLock()
    lock.acquire_read()
    entered = threading.Event()

    def writer():
        with lock.write():
            lock.acquire_read()          # the writer may read (a prepare that runs the graph)
            lock.release_read()
            entered.set()

    t = threading.Thread(target=writer)
    t.start()
    assert not entered.wait(0.05)        # the reader holds it: the writer waits
    lock.release_read()
    assert entered.wait(10)
    t.join(10)
    lock.acquire_read()                  # free again: a reader enters at once
    lock.release_read()
    assert lock._readers == 0 and lock._writer is None


def test_read_write_lock_wakes_a_writer_and_the_readers_behind_it():
    """The last reader to leave wakes the writer waiting for it (release_read notifies only when a writer waits);
    a reader arriving while the writer waits enters after the writer."""
    lock = ReadWriteLock()
    lock.acquire_read()
    lock.acquire_read()
    order, wrote = [], threading.Event()

    def writer():
        with lock.write():
            order.append("writer")
        wrote.set()

    def late_reader():
        with lock.read():
            order.append("reader")

    w = threading.Thread(target=writer)
    w.start()
    while not lock._waiting_writers:
        threading.Event().wait(0.001)
    r = threading.Thread(target=late_reader)
    r.start()
    lock.release_read()
    assert not wrote.wait(0.05)          # one reader still holds it
    lock.release_read()
    assert wrote.wait(10)
    w.join(10)
    r.join(10)
    assert order == ["writer", "reader"] and lock._readers == 0 and lock._writer is None
