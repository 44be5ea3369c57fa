"""examples/minimal_device, a separate pip package, installed next to nnhal: found, run, its kit tests pass.

It is installed with ``pip install --no-deps --no-build-isolation --target DIR`` (about 1.5 s, offline:
the build backend is the test extra's setuptools) and DIR is put on PYTHONPATH of the commands, so
its dist-info, with the ``nnhal.devices`` entry point, is seen exactly as in site-packages.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "minimal_device"
DEVICE_MODULE = "nnhal_example_device/__init__.py"

needs_backend = pytest.mark.skipif(
    importlib.util.find_spec("setuptools") is None or importlib.util.find_spec("wheel") is None,
    reason="building the example needs setuptools and wheel (the [test] extra) for --no-build-isolation")

USE_MINI = '''
import numpy as np
from onnx import TensorProto, helper
import nnhal
nodes = [helper.make_node("MatMul", ["x", "x"], ["m"], name="mm"),
         helper.make_node("Sigmoid", ["m"], ["s"], name="sig"),
         helper.make_node("Add", ["s", "m"], ["a"], name="add"),
         helper.make_node("Relu", ["a"], ["y"], name="relu")]
info = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 3])
model = helper.make_model(helper.make_graph(nodes, "g", [info("x")], [info("y")]),
                          opset_imports=[helper.make_opsetid("", 17)])
x = np.linspace(-2, 2, 9, dtype=np.float32).reshape(3, 3)
with nnhal.Session(model, devices=["mini"]) as s:
    y = s.run({"x": x})[0]
    print("placement", {n: d.device for n, d in s.placement.items()})
m = x @ x
np.testing.assert_allclose(y, np.maximum(1 / (1 + np.exp(-m)) + m, 0), rtol=1e-6)
print("ok")
'''


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    work = tmp_path_factory.mktemp("example")
    source = work / "src"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = work / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                          "--target", str(target), str(source)], capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    assert (target / DEVICE_MODULE).is_file()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]))
    return target, env


def run(env, *args, cwd=None):
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=300, cwd=cwd)


def test_device_code_is_at_most_60_lines():
    assert len((EXAMPLE / "src" / DEVICE_MODULE).read_text().splitlines()) <= 60


@needs_backend
def test_listed_by_nnhal_devices_and_runs_its_nodes(installed):
    _, env = installed
    out = run(env, "-m", "nnhal.cli.main", "devices")
    assert out.returncode == 0, out.stderr
    line = next(line for line in out.stdout.splitlines() if line.startswith("mini "))
    assert "entry point nnhal-example-device" in line and "registered" in line and "1.0" in line
    out = run(env, "-c", USE_MINI)
    assert out.returncode == 0, out.stderr
    assert "'mm': 'mini', 'sig': 'cpu', 'add': 'mini', 'relu': 'mini'" in out.stdout and "ok" in out.stdout


@needs_backend
def test_its_own_tests_pass_with_the_device_kit(installed, tmp_path):
    _, env = installed
    out = run(env, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE / "tests"), cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "failed" not in out.stdout


@needs_backend
def test_a_newer_major_api_is_refused_with_the_reason(installed):
    target, env = installed
    module = target / DEVICE_MODULE
    text = module.read_text()
    module.write_text(text.replace("NNHAL_DEVICE_API = (1, 0)", "NNHAL_DEVICE_API = (2, 0)"))
    try:
        out = run(env, "-m", "nnhal.cli.main", "devices")
    finally:
        module.write_text(text)
    assert out.returncode == 0, out.stderr
    line = next(line for line in out.stdout.splitlines() if line.startswith("mini "))
    assert "unavailable" in line and "2.0" in line
    assert "targets device API 2.0 but this nnhal implements 1.0; a different major version is incompatible" in line
