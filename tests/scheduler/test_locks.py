"""ReadWriteLock (scheduler/locks.py): readers come in without the mutex (issue 27), yet a writer still excludes
every reader, waits for the ones inside, and is woken by the last one to leave."""
from __future__ import annotations

import sys
import threading
import time

from nnhal.scheduler.locks import ReadWriteLock


def test_a_reader_waits_while_a_writer_holds_the_lock():
    lock = ReadWriteLock()
    lock.acquire_write()
    entered = threading.Event()

    def reader():
        lock.acquire_read()
        entered.set()
        lock.release_read()

    t = threading.Thread(target=reader)
    t.start()
    assert not entered.wait(0.05)        # backed off its announcement and waits on the slow path
    assert not lock._fast
    lock.release_write()
    assert entered.wait(10)
    t.join(10)
    assert lock._readers == 0 and not lock._fast and lock._writer is None


def test_readers_and_writers_never_overlap():
    """Many threads taking the read side (the run path) while others take the write side: a writer never sees a
    reader inside, a reader never sees a writer inside, and every count is back to zero at the end."""
    lock = ReadWriteLock()
    state = {"readers": 0, "writer": False, "reads": 0, "writes": 0}
    guard = threading.Lock()
    errors: list[str] = []

    def reader() -> None:
        for _ in range(3000):
            lock.acquire_read()
            with guard:
                if state["writer"]:
                    errors.append("a reader entered while a writer held the lock")
                state["readers"] += 1
            time.sleep(0)                # lets the other threads in while inside
            with guard:
                state["readers"] -= 1
                state["reads"] += 1
            lock.release_read()

    def writer() -> None:
        for _ in range(200):
            with lock.write():
                with guard:
                    if state["readers"] or state["writer"]:
                        errors.append("a writer entered with readers or another writer inside")
                    state["writer"] = True
                time.sleep(0.0001)
                with guard:
                    state["writer"] = False
                    state["writes"] += 1

    threads = [threading.Thread(target=reader) for _ in range(4)] + [threading.Thread(target=writer)
                                                                     for _ in range(2)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)          # switch threads between almost any two bytecodes: every interleaving
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        sys.setswitchinterval(interval)
    assert not any(t.is_alive() for t in threads), "a thread is stuck: a lost wake-up"
    assert not errors, errors[:3]
    assert state["reads"] == 4 * 3000 and state["writes"] == 2 * 200
    assert lock._readers == 0 and not lock._fast and lock._writer is None and lock._waiting_writers == 0
