"""Out-of-tree devices: found at nnhal.init() from entry points and from NNHAL_DEVICE_PATH.

A device module outside nnhal's tree declares, at module level::

    NNHAL_DEVICE_API = (1, 0)           # the device API version it was written against
    def create_device() -> Device: ...  # the record; nnhal registers and unregisters it

and is found in one of two ways:

* an entry point in the group ``nnhal.devices`` of an installed distribution,
  whose name is the device name and whose value is the module
  (``mydev = "mypkg.mydev_device"`` in pyproject's
  ``[project.entry-points."nnhal.devices"]``);
* a directory listed in ``NNHAL_DEVICE_PATH`` (``os.pathsep``-separated) that
  holds ``<name>_device.py`` or a package folder ``<name>_device/``; ``<name>``
  ([a-z0-9]+) is the device name. It is imported as ``nnhal_path_<name>_device``.

The core accepts a declared version with the same major and a minor no newer
than :data:`nnhal.device.device.API_VERSION` (Arm NN's backend rule) and
refuses the others with the reason. Anything a plugin does wrong (import
error, bad version, ``create_device`` or ``init`` raising) makes that plugin
unavailable, with the reason, and nothing else.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from nnhal.device.device import API_VERSION, NAME_PATTERN, Device
from nnhal.errors import RegistryError

ENTRY_POINT_GROUP = "nnhal.devices"
PATH_VARIABLE = "NNHAL_DEVICE_PATH"
API_ATTRIBUTE = "NNHAL_DEVICE_API"
FACTORY = "create_device"
_PATH_ENTRY = re.compile(r"^([a-z0-9]+)_device(\.py)?$")


@dataclass(frozen=True)
class Plugin:
    """A device found outside the tree, not loaded yet: its name, where it comes from, how to load it."""

    name: str
    origin: str
    load: Callable[[], Any]


def check_api(declared: Any) -> tuple[int, int]:
    """The declared (major, minor) when this core accepts it; RegistryError with the reason otherwise."""
    major, minor = API_VERSION
    if declared is None:
        raise RegistryError(f"it declares no {API_ATTRIBUTE}; add {API_ATTRIBUTE} = {API_VERSION} to its module")
    if (not isinstance(declared, tuple) or len(declared) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in declared)):
        raise RegistryError(f"{API_ATTRIBUTE} must be a (major, minor) tuple of ints, got {declared!r}")
    if declared[0] != major:
        raise RegistryError(f"it targets device API {declared[0]}.{declared[1]} but this nnhal implements "
                            f"{major}.{minor}; a different major version is incompatible")
    if declared[1] > minor:
        raise RegistryError(f"it targets device API {declared[0]}.{declared[1]}, newer than this nnhal's "
                            f"{major}.{minor}; upgrade nnhal or build the device against {major}.{minor}")
    return declared


def discover() -> list[Plugin]:
    """Every plugin of the entry-point group, then of each NNHAL_DEVICE_PATH directory, in order."""
    return _entry_points() + _path_plugins(os.environ.get(PATH_VARIABLE, ""))


def _entry_points() -> list[Plugin]:
    found = []
    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = getattr(ep, "dist", None)
        found.append(Plugin(ep.name, f"entry point {dist.name if dist is not None else ep.value}", ep.load))
    return found


def _path_plugins(value: str) -> list[Plugin]:
    found = []
    for folder in (Path(p) for p in value.split(os.pathsep) if p):
        if not folder.is_dir():
            found.append(Plugin(folder.name or str(folder), f"path {folder}", _missing_dir(folder)))
            continue
        for child in sorted(folder.iterdir()):
            match = _PATH_ENTRY.match(child.name)
            is_module = child.is_file() and child.suffix == ".py"
            is_package = child.is_dir() and (child / "__init__.py").is_file()
            if match and (is_module if match.group(2) else is_package):
                found.append(Plugin(match.group(1), f"path {child}", _path_loader(match.group(1), child)))
    return found


def _missing_dir(folder: Path) -> Callable[[], Any]:
    def load() -> Any:
        raise RegistryError(f"{PATH_VARIABLE} lists '{folder}', which is not a directory")
    return load


def _path_loader(name: str, path: Path) -> Callable[[], Any]:
    def load() -> Any:
        module_name = f"nnhal_path_{name}_device"
        if path.is_dir():
            spec = importlib.util.spec_from_file_location(module_name, path / "__init__.py",
                                                          submodule_search_locations=[str(path)])
        else:
            spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
        return module
    return load


@dataclass(frozen=True)
class Loaded:
    """What loading a plugin gave: its record, or the reason it is unavailable (and the version it declared)."""

    device: Device | None
    api: tuple[int, int] | None
    reason: str = ""


def load_plugin(plugin: Plugin) -> Loaded:
    """Import a plugin, check the API version it declares and build its record; never raises."""
    api = None
    try:
        try:
            module = plugin.load()
        except RegistryError:
            raise
        except Exception as exc:
            raise RegistryError(f"import failed: {type(exc).__name__}: {exc}") from exc
        declared = getattr(module, API_ATTRIBUTE, None)
        api = declared if isinstance(declared, tuple) and len(declared) == 2 else None
        if not NAME_PATTERN.match(plugin.name):
            raise RegistryError(f"'{plugin.name}' is not a device name ([a-z0-9]+); rename the entry point")
        check_api(declared)
        factory = getattr(module, FACTORY, None)
        if not callable(factory):
            raise RegistryError(f"its module defines no {FACTORY}() returning the Device record")
        try:
            device = factory()
        except Exception as exc:
            raise RegistryError(f"{FACTORY}() failed: {type(exc).__name__}: {exc}") from exc
        if not isinstance(device, Device):
            raise RegistryError(f"{FACTORY}() returned {type(device).__name__}, not a nnhal Device")
        if device.name != plugin.name:
            raise RegistryError(f"{FACTORY}() returned a device named '{device.name}', but it was found as "
                                f"'{plugin.name}'; the two must match")
    except RegistryError as exc:
        return Loaded(None, api, str(exc))
    return Loaded(device, api)
