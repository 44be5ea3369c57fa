"""The core calls every hook a device fills, at the moment its name says, in order."""
from __future__ import annotations

import numpy as np
import pytest

import nnhal
from nnhal.device.manager import register_device, unregister_device
from nnhal.errors import RegistryError

from tests.device.recording import make_recording_device


def _labels(calls, start=0):
    out = []
    for label, _ in calls[start:]:
        if not out or out[-1] != label:
            out.append(label)
    return out


def test_every_hook_is_called_in_order(relu_add_model):
    calls: list = []
    register_device(make_recording_device("rec", calls))
    try:
        assert calls == [("init", "rec")]
        x = np.array([[-1, 2, -3, 4], [5, -6, 7, -8]], dtype=np.float32)
        with nnhal.Session(relu_add_model, devices=["rec"]) as s:
            z = s.run({"x": x})[0]
            np.testing.assert_allclose(z, np.maximum(np.maximum(x, 0) + np.linspace(-1, 1, 4, dtype=np.float32), 0))
            assert {d.device for d in s.placement.values()} == {"rec"}
            before_close = len(calls)
        labels = _labels(calls)
        expected = ["init", "describe", "evaluation", "split_graph", "optimize_graph", "scheduler.prerun",
                    "allocate", "pre_run", "scheduler.run", "run"]
        assert labels[:len(expected)] == expected
        assert _labels(calls, before_close) == ["scheduler.postrun", "post_run", "release", "release_graph"]
    finally:
        unregister_device("rec")
    assert calls[-1] == ("release_device", "rec")


def test_duplicate_names_are_refused():
    calls: list = []
    register_device(make_recording_device("dup", calls))
    try:
        with pytest.raises(RegistryError, match="already registered"):
            register_device(make_recording_device("dup", calls))
    finally:
        unregister_device("dup")


def test_malformed_name_is_refused():
    with pytest.raises(RegistryError, match=r"\[a-z0-9\]\+"):
        register_device(make_recording_device("Bad-Name", []))


def test_init_is_idempotent_and_registers_cpu():
    nnhal.init()
    nnhal.init()
    names = [d.name for d in nnhal.devices()]
    assert names.count("cpu") == 1
