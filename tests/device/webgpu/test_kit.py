"""The device kit (nnhal.testing) on webgpu: every hook called in lifecycle order (the kit also runs a
model with nothing to overlap, so the synchronous ``run`` is used as well as ``async_run``), subgraph
boundaries against the CPU, fallback to the CPU, and one Session run from several threads at once."""
from __future__ import annotations

from nnhal import testing


def test_hook_order(webgpu):
    testing.check_hook_order("webgpu")


def test_boundaries(webgpu):
    testing.check_boundaries("webgpu")


def test_fallback(webgpu):
    testing.check_fallback("webgpu")


def test_concurrent_runs(webgpu):
    testing.check_concurrent_runs("webgpu")
