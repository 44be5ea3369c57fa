"""A session registers only the devices it names (and the fallback): a CPU-only session never opens the
webgpu device's adapter; a full init() (nnhal devices, device_status) still registers every device."""
from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = r"""
import json, sys
import numpy as np
import nnhal
from nnhal.device import manager
s = nnhal.Session("zoo:squeezenet?weights=random", devices=["cpu"])
s.run({"data_0": np.zeros((1, 3, 224, 224), np.float32)})
after_session = sorted(manager._DEVICES)
wgpu_loaded = "wgpu" in sys.modules
from nnhal import api
names = sorted(st.name for st in api.device_status())
print(json.dumps({"after_session": after_session, "wgpu": wgpu_loaded, "after_init": sorted(manager._DEVICES),
                  "status": names}))
"""


def test_cpu_session_registers_only_the_cpu_device():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["after_session"] == ["cpu"]
    assert got["wgpu"] is False
    # a full init afterwards registers the rest; whatever is unavailable is still listed with its reason
    assert "cpu" in got["after_init"] and set(got["after_init"]) <= set(got["status"])
    assert len(got["status"]) > 1


def test_named_device_is_registered_on_demand():
    from nnhal import api
    from nnhal.device import loading, manager

    api.release()
    try:
        api.init(["vnpu"])
        assert {"cpu", "vnpu"} <= set(manager._DEVICES)
        assert not loading.initialised()
        api.init()
        assert loading.initialised()
        assert {s.name for s in api.device_status()} >= {"cpu", "vnpu"}
    finally:
        api.release()
        api.init()
