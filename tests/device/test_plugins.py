"""Out-of-tree devices: NNHAL_DEVICE_PATH discovery, the device API version rule, broken plugins."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from onnx import helper

import nnhal
from nnhal.api import device_status
from nnhal.device.device import API_VERSION
from nnhal.device.discovery import check_api
from nnhal.errors import RegistryError
from tests.conftest import make_model, vinfo

GOOD = '''
import numpy as np
from nnhal.device.device import Allocator, Description, Device, Interface

NNHAL_DEVICE_API = {api}


def run(device, sg):
    for node in sg.nodes:
        sg.values[node.outputs[0]] = np.abs(sg.values[node.inputs[0]])


def create_device():
    return Device("{name}", Interface(run=run, init={init}),
                  Allocator(describe=lambda d: Description(frozenset({{"Abs"}}), ("fp32",))))
'''


def plugin(name: str, api=API_VERSION, init: str = "None", device_name: str | None = None) -> str:
    return GOOD.format(api=api, name=device_name or name, init=init)


@pytest.fixture
def plugin_dir(tmp_path):
    """A NNHAL_DEVICE_PATH directory with one good device of each form and one of each way to be broken."""
    (tmp_path / "good_device.py").write_text(plugin("good"))
    package = tmp_path / "pkg_device"
    package.mkdir()
    (package / "__init__.py").write_text("from .impl import NNHAL_DEVICE_API, create_device\n")
    (package / "impl.py").write_text(plugin("pkg", api=(API_VERSION[0], 0)))
    (tmp_path / "newer_device.py").write_text(plugin("newer", api=(API_VERSION[0] + 1, 0)))
    (tmp_path / "minor_device.py").write_text(plugin("minor", api=(API_VERSION[0], API_VERSION[1] + 1)))
    (tmp_path / "broken_device.py").write_text("import nnhal_no_such_driver\n")
    (tmp_path / "noapi_device.py").write_text(plugin("noapi").replace("NNHAL_DEVICE_API =", "OTHER ="))
    (tmp_path / "flaky_device.py").write_text(plugin("flaky", init="lambda d: 1 / 0"))
    (tmp_path / "liar_device.py").write_text(plugin("liar", device_name="other"))
    (tmp_path / "README.txt").write_text("not a device")
    return tmp_path


@pytest.fixture
def with_path(plugin_dir, monkeypatch):
    monkeypatch.setenv("NNHAL_DEVICE_PATH", str(plugin_dir) + ":" + str(plugin_dir / "missing"))
    nnhal.release()
    nnhal.init()
    yield {s.name: s for s in device_status()}
    nnhal.release()
    monkeypatch.delenv("NNHAL_DEVICE_PATH")
    nnhal.init()


@pytest.mark.parametrize("declared, accepted", [
    (API_VERSION, True), ((API_VERSION[0], 0), True), ((API_VERSION[0], API_VERSION[1] + 1), False),
    ((API_VERSION[0] + 1, 0), False), ((API_VERSION[0] - 1, 9), False), (None, False), ("1.0", False),
    ((1, 0, 0), False), ((True, 0), False),
])
def test_same_major_and_an_older_or_equal_minor_are_accepted(declared, accepted):
    if accepted:
        assert check_api(declared) == declared
    else:
        with pytest.raises(RegistryError):
            check_api(declared)


def test_path_plugins_register_and_broken_ones_say_why(with_path):
    status = with_path
    assert status["cpu"].available and status["cpu"].origin == "built-in"
    for name, entry in (("good", "good_device.py"), ("pkg", "pkg_device")):
        assert status[name].available, status[name].reason
        assert status[name].origin.startswith("path ") and status[name].origin.endswith(entry)
    assert status["pkg"].api == (API_VERSION[0], 0)
    expected = {
        "newer": "a different major version is incompatible",
        "minor": "newer than this nnhal's",
        "broken": "import failed: ModuleNotFoundError: No module named 'nnhal_no_such_driver'",
        "noapi": "declares no NNHAL_DEVICE_API",
        "flaky": "init hook failed: ZeroDivisionError",
        "liar": "returned a device named 'other', but it was found as 'liar'",
        "missing": "is not a directory",
    }
    for name, reason in expected.items():
        assert not status[name].available and reason in status[name].reason, (name, status[name])
    assert status["newer"].api == (API_VERSION[0] + 1, 0)
    assert "README" not in str(status)
    with pytest.raises(nnhal.DeviceError, match="device 'newer' is unavailable .*major version"):
        nnhal.create_context("c", devices=["newer"])
    x = np.array([-1.5, 2, -3, 0], np.float32)
    model = make_model([helper.make_node("Abs", ["x"], ["y"], name="abs")], [vinfo("x", [4])], [vinfo("y", [4])])
    for name in ("good", "pkg"):
        with nnhal.Session(model, devices=[name]) as s:
            np.testing.assert_array_equal(s.run({"x": x})[0], np.abs(x))
            assert s.placement["abs"].device == name


def test_release_forgets_plugins_and_init_finds_them_again(with_path):
    from nnhal.device import manager

    nnhal.release()
    assert manager.registered_devices() == [] and manager.device_status() == []
    assert {"cpu", "good", "pkg"} <= {d.name for d in nnhal.devices()}     # devices() initialises again
    assert {s.name for s in device_status() if not s.available} >= {"newer", "broken"}


def test_cli_with_broken_plugins_still_works(plugin_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("NNHAL_DEVICE_PATH", str(plugin_dir))
    model = tmp_path / "abs.onnx"
    model.write_bytes(make_model([helper.make_node("Abs", ["x"], ["y"], name="abs")],
                                 [vinfo("x", [4])], [vinfo("y", [4])]).SerializeToString())

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "nnhal.cli.main", *args], capture_output=True, text=True,
                              timeout=300)

    out = cli("devices")
    assert out.returncode == 0, out.stderr
    lines = {line.split()[0]: line for line in out.stdout.splitlines()[1:]}
    assert "registered" in lines["good"] and "path " in lines["good"]
    assert "unavailable" in lines["newer"] and f"{API_VERSION[0] + 1}.0" in lines["newer"]
    assert "import failed" in lines["broken"]
    run = cli("run", str(model), "--device", "good", "--repeat", "1")
    assert run.returncode == 0, run.stderr
    assert "good: 1 nodes" in run.stdout
    placement = cli("placement", str(model), "--device", "good")
    assert placement.returncode == 0, placement.stderr


def test_a_builtin_entry_that_fails_leaves_the_others_registered(tmp_path, monkeypatch):
    """What init() does with each enabled registry entry: a failure marks that device only."""
    from types import SimpleNamespace

    from nnhal.device.loading import register_builtin
    from nnhal.device.manager import clear_unavailable, registered_devices

    (tmp_path / "nnhal_test_raising_device.py").write_text(
        "def register_raising_device():\n    raise OSError('driver not loaded')\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def entry(name, module, packages=()):
        return SimpleNamespace(name=name, module=module, register=f"register_{name}_device",
                               unregister=f"unregister_{name}_device", packages=packages)

    before = [d.name for d in registered_devices()]
    try:
        register_builtin(entry("gone", "nnhal.device.gone.gone_device"))
        register_builtin(entry("raising", "nnhal_test_raising_device"))
        register_builtin(entry("needy", "nnhal_test_raising_device", ("nnhal_no_such_package",)))
        status = {s.name: s for s in device_status()}
        assert "No module named 'nnhal.device.gone'" in status["gone"].reason
        assert "register_raising_device() failed: OSError: driver not loaded" in status["raising"].reason
        assert "nnhal_no_such_package" in status["needy"].reason
        assert [d.name for d in registered_devices()] == before and status["cpu"].available
    finally:
        clear_unavailable()


def test_load_plugin_reasons_for_entry_point_shaped_mistakes():
    from types import SimpleNamespace

    from nnhal.device.discovery import Plugin, load_plugin

    def module(**attrs):
        return lambda: SimpleNamespace(NNHAL_DEVICE_API=API_VERSION, **attrs)

    def boom():
        raise OSError("no /dev/npu0")

    cases = {
        "Bad-Name": (module(create_device=lambda: None), "is not a device name"),
        "nofactory": (module(), "defines no create_device()"),
        "notdevice": (module(create_device=lambda: "npu"), "returned str, not a nnhal Device"),
        "raising": (module(create_device=boom), "create_device() failed: OSError: no /dev/npu0"),
    }
    for name, (load, reason) in cases.items():
        loaded = load_plugin(Plugin(name, "entry point test", load))
        assert loaded.device is None and reason in loaded.reason, (name, loaded)
        assert loaded.api == API_VERSION
