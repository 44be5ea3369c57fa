"""Device registration through CMake: a new folder, its option, the one regenerate command."""
from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

needs_cmake = pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not on PATH (the registry is rendered by CMake)")

TPU_CMAKE = """
nnhal_add_device(
  NAME tpu
  MODULE tpu_device.py
  DEFAULT OFF
  PACKAGES numpy
  DESCRIPTION "test accelerator added by a hardware team")
"""

TPU_MODULE = '''
"""A minimal device: Relu only, in numpy."""
import numpy as np

from nnhal.device.device import Allocator, Description, Device, Interface
from nnhal.device.manager import register_device, unregister_device


def tpu_run(device, subgraph):
    for node in subgraph.nodes:
        subgraph.values[node.outputs[0]] = np.maximum(subgraph.values[node.inputs[0]], 0)
    device.privacy["runs"] += 1


def tpu_describe(device):
    return Description(frozenset({"Relu"}), ("fp32",), summary="test tpu")


def register_tpu_device():
    register_device(Device("tpu", Interface(run=tpu_run), Allocator(describe=tpu_describe), privacy={"runs": 0}))


def unregister_tpu_device():
    unregister_device("tpu")
'''

USE_TPU = '''
import numpy as np, onnx
from onnx import helper, TensorProto
import nnhal
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
with nnhal.Session(m, devices=["tpu"]) as s:
    y = s.run({"x": np.array([-1, 0, 2], np.float32)})[0]
    print("placed", s.placement["r"].device, "result", y.tolist())
'''


def copy_tree(dst: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "build", ".git")
    for name in ("CMakeLists.txt", "pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dst / name)
    for name in ("cmake", "tools", "source", "python"):
        shutil.copytree(ROOT / name, dst / name, symlinks=True, ignore=ignore)
    return dst


def add_device(tree: Path, name: str, cmake: str, module: str) -> None:
    folder = tree / "source" / "device" / name
    folder.mkdir()
    (folder / "CMakeLists.txt").write_text(textwrap.dedent(cmake))
    (folder / f"{name}_device.py").write_text(module)
    (folder / "__init__.py").write_text("")


def isolated_env(target: Path) -> dict[str, str]:
    """PYTHONPATH = the installed copy first, then this interpreter's site-packages (run with -S)."""
    paths = [str(target)] + site.getsitepackages() + [sysconfig.get_paths()["purelib"]]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def nnhal_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    # -S: no .pth files, so an editable install of the real tree cannot shadow the copy
    return subprocess.run([sys.executable, "-S", "-m", "nnhal.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=300)


@needs_cmake
def test_new_device_folder_is_enabled_by_the_registry_command(tmp_path):
    tree = copy_tree(tmp_path / "tree" if (tmp_path / "tree").mkdir() is None else tmp_path)
    add_device(tree, "tpu", TPU_CMAKE, TPU_MODULE)
    target = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                              "--target", str(target), str(tree)], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout + install.stderr
    env = isolated_env(target)

    before = nnhal_cli(env, "devices")
    assert before.returncode == 0, before.stderr
    tpu_line = next(line for line in before.stdout.splitlines() if line.startswith("tpu"))
    assert "NNHAL_ENABLE_TPU=OFF" in tpu_line and "registered" not in tpu_line

    regen = nnhal_cli(env, "registry", "--enable", "tpu")
    assert regen.returncode == 0, regen.stdout + regen.stderr
    assert "enabled: cpu, tpu" in regen.stdout

    after = nnhal_cli(env, "devices")
    tpu_line = next(line for line in after.stdout.splitlines() if line.startswith("tpu"))
    assert "NNHAL_ENABLE_TPU=ON" in tpu_line and "registered" in tpu_line and "fp32" in tpu_line

    use = subprocess.run([sys.executable, "-S", "-c", USE_TPU], env=env, capture_output=True, text=True, timeout=300)
    assert use.returncode == 0, use.stderr
    assert "placed tpu result [0.0, 0.0, 2.0]" in use.stdout

    off = nnhal_cli(env, "registry", "--disable", "tpu")
    assert off.returncode == 0, off.stderr
    assert "off: tpu" in off.stdout


@needs_cmake
def test_enabled_device_with_missing_package_fails_configure(tmp_path):
    tree = copy_tree(tmp_path)
    add_device(tree, "needy", TPU_CMAKE.replace("tpu", "needy").replace("PACKAGES numpy",
               "PACKAGES nnhal_no_such_package"), TPU_MODULE.replace("tpu", "needy"))
    build = tmp_path / "build"
    proc = subprocess.run(["cmake", "-S", str(tree), "-B", str(build), "-DNNHAL_ENABLE_NEEDY=ON",
                           f"-DPython_EXECUTABLE={sys.executable}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    out = " ".join((proc.stdout + proc.stderr).split())
    assert "needs the Python package 'nnhal_no_such_package'" in out
    assert "-DNNHAL_ENABLE_NEEDY=OFF" in out

    from nnhal.cli.registry import regenerate
    from nnhal.errors import RegistryError
    with pytest.raises(RegistryError, match="nnhal_no_such_package.*NNHAL_ENABLE_NEEDY=OFF"):
        regenerate(["needy"], [], str(tree))


@needs_cmake
def test_unknown_device_name_is_refused(tmp_path):
    from nnhal.cli.registry import regenerate
    from nnhal.errors import RegistryError
    with pytest.raises(RegistryError, match="no device folder declares \\['nosuch'\\]"):
        regenerate(["nosuch"], [], str(copy_tree(tmp_path)))


def test_registry_template_renders_an_explicit_table():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import render_registry
    finally:
        sys.path.pop(0)
    text = render_registry.render(render_registry.parse_manifest(
        "cpu|nnhal.device.cpu.cpu_device|NNHAL_ENABLE_CPU|ON|ON||numpy CPU\n"
        "npu|nnhal.device.npu.npu_device|NNHAL_ENABLE_NPU|OFF|OFF|foo,bar|an npu\n"), "/src")
    ns: dict = {}
    exec(text, ns)
    assert [d.name for d in ns["DEVICES"]] == ["cpu"]
    npu = ns["ALL_DEVICES"][1]
    assert (npu.register, npu.unregister, npu.packages, npu.enabled) == ("register_npu_device", "unregister_npu_device", ("foo", "bar"), False)
