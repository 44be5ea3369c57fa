"""Every native entry point called with spoiled arguments gives a typed error, never a crash.

The calls run in a child process (native_fuzz_cases.py): a segmentation fault there is this test failing, not
the test run dying. The child first calls each entry point with good arguments, so a check that refused
everything would fail here too."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nnhal.device.cpu import native

CASES = Path(__file__).with_name("native_fuzz_cases.py")


@pytest.mark.skipif(not native.available(), reason=f"native kernels not loaded: {native.status().reason}")
def test_every_native_entry_point_refuses_bad_arguments_with_a_typed_error():
    done = subprocess.run([sys.executable, str(CASES)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"the fuzz child died (exit {done.returncode}): {done.stderr[-2000:]}"
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["failures"] == [], "\n".join(report["failures"])
    # the entry points (functions, constructors, run methods), each argument spoiled several ways
    assert report["checked"] >= 400, report
