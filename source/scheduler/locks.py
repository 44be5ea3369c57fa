"""Per-device run locks: the core serialises calls to a device that is not reentrant.

A device whose ``Description.reentrant`` is False is entered by one run at a
time. The lock is re-entrant for the thread holding it (one run may have
several subgraphs of that device in flight), and a run only ever *blocks* on a
lock while it holds none, so two runs using two non-reentrant devices in
opposite orders cannot deadlock: a run holding a lock tries the next one
without blocking and, when it is taken, runs other ready work first.
"""
from __future__ import annotations

import threading

_locks: dict[str, threading.RLock] = {}
_guard = threading.Lock()


def device_lock(name: str) -> threading.RLock:
    """The run lock of the device called ``name`` (made on first use)."""
    lock = _locks.get(name)
    if lock is None:
        with _guard:
            lock = _locks.setdefault(name, threading.RLock())
    return lock


class HeldLocks:
    """The device locks one run holds, counted per device (a device may have several subgraphs in flight)."""

    def __init__(self) -> None:
        self._count: dict[str, int] = {}

    def any(self) -> bool:
        return bool(self._count)

    def enter(self, name: str, blocking: bool) -> bool:
        """Take ``name``'s lock; False when ``blocking`` is False and another run holds it."""
        if not device_lock(name).acquire(blocking):
            return False
        self._count[name] = self._count.get(name, 0) + 1
        return True

    def leave(self, name: str) -> None:
        count = self._count.get(name, 0)
        if count == 0:
            return
        device_lock(name).release()
        if count == 1:
            del self._count[name]
        else:
            self._count[name] = count - 1

    def release_all(self) -> None:
        for name, count in list(self._count.items()):
            for _ in range(count):
                device_lock(name).release()
        self._count.clear()


class ReadWriteLock:
    """Many readers (runs of a prepared graph) or one writer (preparing it again), writers first.

    A writer waiting keeps new readers out, so a re-prepare is not starved by a stream of runs. The
    writing thread may take either side again (a prepare that runs the graph to measure it).
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._cond = threading.Condition(self._mutex)
        self._readers = 0                     # readers that came in by the slow path (under the mutex)
        # NOTE: the run path takes no mutex (issue 27): a reader announces itself by appending to this list and
        # stays when no writer holds or waits for the lock, else takes its announcement back and goes the slow
        # path. list.append/pop are atomic under the GIL, so the order is total: a writer first counts itself
        # waiting, then waits for no announcement; a reader first announces, then looks for writers. Either the
        # reader sees the writer (and backs off) or the writer sees the reader (and waits for its release, which
        # then sees the waiting writer and wakes it).
        self._fast: list[None] = []
        self._writer: int | None = None       # the writing thread's ident
        self._depth = 0                       # its nested acquisitions
        self._waiting_writers = 0

    def acquire_read(self) -> None:
        fast = self._fast
        fast.append(None)
        # NOTE: waiting writers first, then the writer: a writer sets _writer before it stops counting itself
        # waiting (acquire_write), so a reader that reads no waiting writer and then no writer cannot have
        # missed one that got past its check of the announcements
        if not self._waiting_writers and self._writer is None:
            return
        fast.pop()                            # a writer holds or waits: the slow path
        if self._waiting_writers:             # this announcement may be what a waiting writer saw: wake it
            with self._cond:
                self._cond.notify_all()
        me = threading.get_ident()
        with self._cond:
            if self._writer == me:
                self._depth += 1
                return
            while self._writer is not None or self._waiting_writers:
                self._cond.wait()
            self._readers += 1

    def release_read(self) -> None:
        if self._writer is not None and self._writer == threading.get_ident():
            self._depth -= 1                  # the writer's own nested read (only it changes _writer from itself)
            return
        # NOTE: readers are only counted, the announcements and _readers together: any reader may take back any
        # announcement; when there is none left (another reader's release took the last), it was counted in _readers
        try:
            self._fast.pop()
        except IndexError:
            with self._mutex:
                self._readers -= 1
        # NOTE: only a waiting writer waits for the readers to leave (a reader waits only while a writer holds the
        # lock or waits for it): no notify_all (~1 us of Python) on the run path without one
        if self._waiting_writers:
            with self._cond:
                self._cond.notify_all()

    def _busy(self) -> bool:
        """Readers in (either path) or a writer holds the lock: a writer waits (called under the mutex)."""
        return self._writer is not None or self._readers > 0 or bool(self._fast)

    def acquire_write(self) -> None:
        me = threading.get_ident()
        with self._cond:
            if self._writer == me:
                self._depth += 1
                return
            self._waiting_writers += 1
            try:
                while self._busy():
                    self._cond.wait()
                self._writer, self._depth = me, 1     # NOTE: before the waiting count drops (acquire_read)
            finally:
                self._waiting_writers -= 1

    def release_write(self) -> None:
        with self._cond:
            self._depth -= 1
            if self._depth == 0:
                self._writer = None
                self._cond.notify_all()

    def write(self) -> "_Held":
        """``with lock.write():``"""
        return _Held(self.acquire_write, self.release_write)

    def read(self) -> "_Held":
        """``with lock.read():``"""
        return _Held(self.acquire_read, self.release_read)


class _Held:
    def __init__(self, acquire, release) -> None:
        self._acquire, self._release = acquire, release

    def __enter__(self) -> None:
        self._acquire()

    def __exit__(self, *exc: object) -> None:
        self._release()
