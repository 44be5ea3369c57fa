"""Without the openvino package: the device is listed unavailable with the reason, and a session asking for
it says so. The absence is simulated in a fresh interpreter whose import machinery cannot find openvino
(a PathFinder that skips it), so the check runs whether or not the package is installed here."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

HIDE = textwrap.dedent("""
    import importlib.machinery, json, sys

    class Hidden(importlib.machinery.PathFinder):
        @classmethod
        def find_spec(cls, name, path=None, target=None):
            if name == "openvino" or name.startswith("openvino."):
                return None
            return super().find_spec(name, path, target)

    sys.meta_path[:] = [Hidden if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
    import nnhal
    nnhal.init()
    from nnhal.api import device_status
    listed = {d.name: d for d in device_status()}
    entry = listed.get("openvino")
    out = {"listed": entry is not None, "available": getattr(entry, "available", None),
           "reason": getattr(entry, "reason", "")}
    try:
        nnhal.create_context("x", devices=["openvino", "cpu"])
        out["context"] = "created"
    except nnhal.NnhalError as exc:
        out["context"] = str(exc)
    print(json.dumps(out))
""")


def test_without_the_package_the_device_is_unavailable_with_the_reason():
    done = subprocess.run([sys.executable, "-c", HIDE], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if not out["listed"]:
        # a build with NNHAL_ENABLE_OPENVINO=OFF does not list it at all: nothing to check
        import pytest

        pytest.skip("this build has NNHAL_ENABLE_OPENVINO=OFF")
    assert out["available"] is False
    assert "openvino" in out["reason"]
    assert "openvino" in out["context"] and "unavailable" in out["context"]
