"""Cleanup that runs every hook: one failing hook does not stop the others.

Releasing a graph calls hooks of several devices (post_run, allocator.release,
release_graph). Each is called even when an earlier one raised; afterwards a
single DeviceError names every device and hook that failed, with the first
error chained.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from nnhal.errors import DeviceError


@dataclass
class Cleanup:
    """Collects hook calls' failures; :meth:`raise_if_failed` reports them all at once."""

    what: str
    failures: list[tuple[str, str, BaseException]] = field(default_factory=list)

    def call(self, device: str, hook: str, fn: Callable[..., object], *args: object) -> None:
        try:
            fn(*args)
        except Exception as exc:  # collected: every other hook still runs
            self.failures.append((device, hook, exc))

    def raise_if_failed(self) -> None:
        if not self.failures:
            return
        parts = "; ".join(f"device '{d}' hook {h} raised {type(e).__name__}: {e}" for d, h, e in self.failures)
        raise DeviceError(f"{self.what}: {len(self.failures)} cleanup hook(s) failed (every other hook ran): "
                          f"{parts}") from self.failures[0][2]
