"""Values derived from a model's constants, shared by every prepared input shape of one graph handle.

A model with a symbolic axis is prepared once per distinct input shape (docs/concurrency.md#input-shapes);
most of what prepare derives from the weights (a merged projection's weight, a native GEMM's packed panels)
does not depend on that shape. :class:`DerivedCache` holds such values, keyed by the identity of the arrays
they were derived from and the parameters of the derivation, so a re-prepare finds them instead of
deriving them again, and every entry shares one copy (not one per entry).

Stages reach the cache of the prepare in progress through :func:`derive` (a context variable set by
:func:`deriving` around one prepare): outside a prepare with a cache (``nnhal.explain``, a test calling a
pass directly) ``derive`` simply makes the value. The value must be a pure function of the source
arrays' contents and the parameters; the cache holds the sources themselves, so their identity cannot be
reused by another array while an item lives.

Bounded: each item records the prepares (tokens) that used it; :meth:`DerivedCache.release` of a token
(its entry evicted or released) drops the items no live token uses, and :meth:`DerivedCache.clear` drops
all. The items are thus at most what the live entries use.
"""
from __future__ import annotations

import contextlib
import contextvars
import threading
from typing import Any, Callable, Hashable

import numpy as np

_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("nnhal_derived", default=None)


def _owner(a: Any) -> Any:
    """The object owning ``a``'s memory (the end of its chain of views); ``a`` itself if not an array."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a


def _source_key(a: Any) -> tuple:
    """What identifies ``a``'s contents while its owner lives: the owner's identity and, for an array, the
    view (first element's address, shape, strides, dtype)."""
    if isinstance(a, np.ndarray):
        return (id(_owner(a)), a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.str)
    return (id(a),)


class DerivedCache:
    """Derived constants of one graph handle, shared by its prepared entries (see the module docstring).

    Thread-safe: a lock guards the items (prepare itself runs under the handle's write lock)."""

    def __init__(self) -> None:
        self._items: dict[tuple, list] = {}     # key -> [value, sources, tokens using it]
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, token: object, kind: str, sources: tuple, params: Hashable, make: Callable[[], Any]) -> Any:
        """The cached value of ``kind`` from ``sources`` with ``params``, made by ``make()`` on a miss; the
        item is marked used by ``token``."""
        key = (kind, tuple(_source_key(s) for s in sources), params)
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                item[2].add(token)
                self.hits += 1
                return item[0]
        value = make()                           # outside the lock: packing may take a while
        with self._lock:
            item = self._items.setdefault(key, [value, tuple(_owner(s) for s in sources), set()])
            item[2].add(token)
            self.misses += 1
            return item[0]

    def release(self, token: object) -> None:
        """Forget ``token``'s use; drop the items no other token uses."""
        with self._lock:
            for key in [k for k, item in self._items.items() if token in item[2]]:
                users = self._items[key][2]
                users.discard(token)
                if not users:
                    del self._items[key]

    def clear(self) -> None:
        """Drop every item."""
        with self._lock:
            self._items.clear()


@contextlib.contextmanager
def deriving(cache: DerivedCache | None, token: object):
    """Make ``cache`` (for the prepare identified by ``token``) the one :func:`derive` uses in this context."""
    reset = _ACTIVE.set(None if cache is None else (cache, token))
    try:
        yield
    finally:
        _ACTIVE.reset(reset)


def derive(kind: str, sources: tuple, params: Hashable, make: Callable[[], Any]) -> Any:
    """``make()``, or the value the active prepare's cache holds for (``kind``, ``sources``' identities,
    ``params``). ``make`` must depend only on the contents of ``sources`` and on ``params``."""
    active = _ACTIVE.get()
    if active is None:
        return make()
    cache, token = active
    return cache.get(token, kind, sources, params, make)
