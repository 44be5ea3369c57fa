"""The webgpu tests run where wgpu finds an adapter (lavapipe in CI) and skip, saying why, elsewhere."""
from __future__ import annotations

import pytest

import nnhal
from nnhal.device.manager import find_device


@pytest.fixture(scope="session")
def webgpu():
    """The registered webgpu device, with an adapter; skips with the device's own reason otherwise."""
    nnhal.init()
    device = find_device("webgpu")
    desc = device.describe()
    if not desc.ops:
        pytest.skip(f"webgpu has no adapter here: {desc.summary}")
    return device
