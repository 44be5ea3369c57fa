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

needs_cmake = pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not on PATH (the registry is "
                                                                       "rendered by CMake)")

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


def pip_install(tree: Path, target: Path) -> None:
    # the registry is what these installs check: the cpu device's C kernels (tested by tests/device/cpu, built by
    # CI's own install) are left out, which took two thirds of this file's time (two full native builds)
    no_kernels = [f"--config-settings=cmake.define.{option}=OFF"
                  for option in ("NNHAL_NATIVE_KERNELS", "NNHAL_INTEGER_KERNELS")]
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--upgrade",
                              *no_kernels, "--target", str(target), str(tree)], capture_output=True, text=True,
                             timeout=600)
    assert install.returncode == 0, install.stdout + install.stderr


def device_line(out: subprocess.CompletedProcess, name: str) -> str:
    assert out.returncode == 0, out.stderr
    return next(line for line in out.stdout.splitlines() if line.split()[:1] == [name])


def switched(out: subprocess.CompletedProcess) -> tuple[list[str], list[str]]:
    """The enabled and off device lists printed by `nnhal registry` (whatever other folders exist)."""
    line = next(line for line in out.stdout.splitlines() if line.strip().startswith("enabled:"))
    on, _, off = line.strip()[len("enabled:"):].partition("; off:")
    return [n.strip() for n in on.split(",") if n.strip()], [n.strip() for n in off.split(",") if n.strip()]


@needs_cmake
def test_new_device_folder_is_enabled_by_the_registry_command_and_survives_a_reinstall(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    copy_tree(tree)
    add_device(tree, "tpu", TPU_CMAKE, TPU_MODULE)
    target = tmp_path / "site"
    pip_install(tree, target)       # a regular (non-editable) install
    env = isolated_env(target)
    before = device_line(nnhal_cli(env, "devices"), "tpu")
    assert "NNHAL_ENABLE_TPU=OFF" in before and "registered" not in before

    regen = nnhal_cli(env, "registry", "--enable", "tpu")
    assert regen.returncode == 0, regen.stdout + regen.stderr
    on, off = switched(regen)
    assert "tpu" in on and "cpu" in on and "tpu" not in off
    assert "tpu=ON" in (tree / "nnhal-devices.txt").read_text().splitlines()

    after = device_line(nnhal_cli(env, "devices"), "tpu")
    assert "NNHAL_ENABLE_TPU=ON" in after and "registered" in after and "fp32" in after
    use = subprocess.run([sys.executable, "-S", "-c", USE_TPU], env=env, capture_output=True, text=True, timeout=300)
    assert use.returncode == 0, use.stderr
    assert "placed tpu result [0.0, 0.0, 2.0]" in use.stdout

    pip_install(tree, target)       # reinstall: the build reads nnhal-devices.txt
    again = device_line(nnhal_cli(env, "devices"), "tpu")
    assert "NNHAL_ENABLE_TPU=ON" in again and "registered" in again

    # a folder added after a regular install cannot be carried without reinstalling: say so, keep the choice
    add_device(tree, "toy", TPU_CMAKE.replace("tpu", "toy"), TPU_MODULE.replace("tpu", "toy"))
    toy = nnhal_cli(env, "registry", "--enable", "toy")
    assert toy.returncode == 1, toy.stdout + toy.stderr
    assert "Traceback" not in toy.stderr and f"pip install {tree}" in toy.stdout
    assert "toy=ON" in (tree / "nnhal-devices.txt").read_text().splitlines()
    assert "toy" not in nnhal_cli(env, "devices").stdout      # the installed registry is unchanged

    off = nnhal_cli(env, "registry", "--disable", "tpu", "--disable", "toy")
    assert off.returncode == 0, off.stdout + off.stderr
    assert {"tpu", "toy"} <= set(switched(off)[1])
    assert "tpu=OFF" in (tree / "nnhal-devices.txt").read_text().splitlines()


@needs_cmake
def test_missing_package_is_checked_at_registration_not_at_configure(tmp_path):
    import nnhal
    from nnhal.cli.registry import regenerate
    from nnhal.device.loading import register_builtin
    from nnhal.device.manager import clear_unavailable
    from nnhal.errors import RegistryError

    tree = copy_tree(tmp_path)
    add_device(tree, "needy", TPU_CMAKE.replace("tpu", "needy").replace("PACKAGES numpy",
               "PACKAGES nnhal_no_such_package"), TPU_MODULE.replace("tpu", "needy"))
    build = tmp_path / "build"
    proc = subprocess.run(["cmake", "-S", str(tree), "-B", str(build), "-DNNHAL_ENABLE_NEEDY=ON",
                           f"-DPython_EXECUTABLE={sys.executable}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr     # pip's isolated build Python proves nothing
    ns: dict = {}
    exec((build / "registry.py").read_text(), ns)
    needy = next(e for e in ns["DEVICES"] if e.name == "needy")
    assert needy.packages == ("nnhal_no_such_package",)

    register_builtin(needy)        # what nnhal.init() does with an enabled entry
    try:
        status = next(s for s in nnhal.api.device_status() if s.name == "needy")
        assert not status.available
        assert "needs the Python package(s) nnhal_no_such_package" in status.reason
        assert "nnhal registry --disable needy" in status.reason
        with pytest.raises(nnhal.DeviceError, match="device 'needy' is unavailable .*nnhal_no_such_package"):
            nnhal.create_context("c", devices=["needy"])
    finally:
        clear_unavailable()

    with pytest.raises(RegistryError, match="'needy' needs the Python package\\(s\\) nnhal_no_such_package"):
        regenerate(["needy"], [], str(tree))
    assert not (tree / "nnhal-devices.txt").exists()


@needs_cmake
def test_devices_file_sets_the_default_and_a_define_still_wins(tmp_path):
    tree = copy_tree(tmp_path)
    add_device(tree, "tpu", TPU_CMAKE, TPU_MODULE)
    (tree / "nnhal-devices.txt").write_text("# choices\ntpu=ON\nghost=ON\nbad line\n")

    def enabled(*defines: str) -> dict[str, bool]:
        build = tmp_path / f"build{len(defines)}"
        proc = subprocess.run(["cmake", "-S", str(tree), "-B", str(build), f"-DPython_EXECUTABLE={sys.executable}",
                               *defines], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "no device folder declares it" in proc.stderr and "ignoring 'bad line'" in proc.stderr
        ns: dict = {}
        exec((build / "registry.py").read_text(), ns)
        return {e.name: e.enabled for e in ns["ALL_DEVICES"]}

    assert enabled()["tpu"] is True
    assert enabled("-DNNHAL_ENABLE_TPU=OFF")["tpu"] is False


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
    assert (npu.register, npu.unregister, npu.packages, npu.enabled) == (
        "register_npu_device", "unregister_npu_device", ("foo", "bar"), False)
