"""`nnhal run` says each warning once: an unavailable device it was asked for is the error line alone
(not init()'s warning as well), one it was not asked for is one warning, and a fallback is the report's
line alone (not the scheduler's warning as well)."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.cli.models import conv_softmax, save

BROKEN = "import nnhal_no_such_driver\n"
FLAKY = '''
from nnhal.device.device import Allocator, Description, Device, Interface

NNHAL_DEVICE_API = (1, 0)


def pre_run(device, sg, options):
    raise RuntimeError("injected pre_run fault")


def create_device():
    return Device("flaky", Interface(run=lambda d, sg: None, pre_run=pre_run),
                  Allocator(describe=lambda d: Description(frozenset({"Relu"}), ("fp32",))))
'''


def run_cli(tmp_path, plugin: str, source: str, devices: str) -> subprocess.CompletedProcess:
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / f"{plugin}_device.py").write_text(source)
    model = save(conv_softmax(), tmp_path)
    env = {**os.environ, "NNHAL_DEVICE_PATH": str(folder)}
    return subprocess.run([sys.executable, "-m", "nnhal.cli.main", "run", model, "--device", devices,
                           "--repeat", "1", "--quiet"], capture_output=True, text=True, env=env, timeout=300)


def test_an_unavailable_device_asked_for_is_said_once_in_the_error(tmp_path):
    out = run_cli(tmp_path, "broken", BROKEN, "broken,cpu")
    assert out.returncode == 2
    said = out.stdout + out.stderr
    assert said.count("No module named 'nnhal_no_such_driver'") == 1, said
    assert "nnhal: error: device 'broken' is unavailable" in out.stderr


def test_an_unavailable_device_not_asked_for_is_warned_once(tmp_path):
    out = run_cli(tmp_path, "broken", BROKEN, "cpu")
    assert out.returncode == 0, out.stderr
    said = out.stdout + out.stderr
    assert said.count("No module named 'nnhal_no_such_driver'") == 1, said
    assert "device 'broken' (path " in out.stderr


def test_a_fallback_is_reported_once(tmp_path):
    out = run_cli(tmp_path, "flaky", FLAKY, "flaky,cpu")
    assert out.returncode == 0, out.stderr
    said = out.stdout + out.stderr
    assert said.count("injected pre_run fault") == 1, said
    assert "fallback: subgraph #1 (1 nodes) failed on 'flaky' at pre_run" in out.stdout
