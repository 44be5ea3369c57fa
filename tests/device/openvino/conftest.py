"""The openvino tests run where the openvino wheel is installed (the extra nnhal[openvino]) and skip,
saying why, elsewhere; tests/device/openvino/test_absent.py checks the device's own behaviour without it."""
from __future__ import annotations

import importlib.util

import pytest

import nnhal
from nnhal.device.manager import find_device

HAVE_OPENVINO = importlib.util.find_spec("openvino") is not None


@pytest.fixture(scope="session")
def openvino():
    """The registered openvino device; skips with the reason when the package or the build option is absent."""
    if not HAVE_OPENVINO:
        pytest.skip("the openvino package is not installed (pip install nnhal[openvino])")
    nnhal.init()
    try:
        return find_device("openvino")
    except nnhal.NnhalError as exc:
        pytest.skip(f"the openvino device is not registered: {exc}")
