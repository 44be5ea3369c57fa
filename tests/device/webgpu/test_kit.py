"""The device kit (nnhal.testing) on webgpu: subgraph boundaries against the CPU, fallback to the CPU,
and one Session run from several threads at once.

NOTE: testing.check_hook_order is left out: it requires ``run`` to be called, but with two recording
copies the default scheduler may start every webgpu subgraph with ``async_run`` (whether a later
subgraph overlaps depends on timing), so it passed 2 runs of 3 here. Reported to the kit's owner."""
from __future__ import annotations

from nnhal import testing


def test_boundaries(webgpu):
    testing.check_boundaries("webgpu")


def test_fallback(webgpu):
    testing.check_fallback("webgpu")


def test_concurrent_runs(webgpu):
    testing.check_concurrent_runs("webgpu")
