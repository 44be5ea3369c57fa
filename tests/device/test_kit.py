"""The device kit (nnhal.testing) on every in-tree device: cpu, vnpu and webgpu (on lavapipe in CI; skipped,
with the reason, where wgpu finds no adapter).

Every capability check runs whole. Conformance runs a fixed sample of each device's node cases (every k-th
of the cases whose ops the device describes, SAMPLE of them, with the weights as graph inputs and as
initializers) to keep the suite's time modest; ``nnhal validate --device <name>`` runs them all."""
from __future__ import annotations

import functools

import pytest

import nnhal
from nnhal import testing

DEVICES = ("cpu", "vnpu", "webgpu")
SAMPLE = 40
CHECKS = ("check_hook_order", "check_boundaries", "check_fallback", "check_concurrent_runs",
          "check_output_ownership", "check_lifetime", "check_api_version")


def _available(device: str) -> None:
    nnhal.init()
    from nnhal.device.manager import find_device

    desc = find_device(device).describe()
    if not desc.ops:
        pytest.skip(f"{device} has nothing to run here: {desc.summary}")


@functools.cache
def _sample(device: str) -> tuple:
    cases = testing.conformance_cases(device)
    return tuple(cases[::max(1, len(cases) // SAMPLE)][:SAMPLE])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("check", CHECKS)
def test_capability(device, check):
    _available(device)
    getattr(testing, check)(device)


@pytest.mark.parametrize("device", DEVICES)
def test_random_graphs(device):
    _available(device)
    testing.check_random_graphs(device, range(5))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("constant_weights", [False, True], ids=["weights-as-inputs", "constant-weights"])
@pytest.mark.parametrize("index", range(SAMPLE))
def test_conformance_sample(device, constant_weights, index):
    _available(device)
    cases = _sample(device)
    if index >= len(cases):
        pytest.skip(f"{device} has {len(cases)} sampled cases")
    testing.check_case(device, cases[index], constant_weights=constant_weights)
