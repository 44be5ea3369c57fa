"""Device loading: ``nnhal.init()`` registers the devices of the generated registry (nnhal/registry.py,
rendered by CMake) and the out-of-tree ones; ``nnhal.release()`` unregisters them in reverse order. A
device that cannot be registered is recorded as unavailable with the reason (``nnhal devices``)."""
from __future__ import annotations

import importlib
import importlib.util
import logging
import threading
from collections.abc import Sequence
from typing import Any, Callable

from nnhal.device.device import API_VERSION
from nnhal.device.discovery import discover as discover_plugins
from nnhal.device.discovery import load_plugin
from nnhal.device.manager import (
    BUILT_IN,
    FALLBACK_DEVICE,
    DeviceStatus,
    clear_unavailable,
    mark_unavailable,
    register_device,
    registered_devices,
    unregister_device,
)
from nnhal.device.manager import device_status as manager_status
from nnhal.errors import RegistryError

log = logging.getLogger("nnhal")
_lock = threading.RLock()
_registered: list[tuple[str, Callable[[], None]]] = []   # (device, how to unregister it), in init() order
_initialised = False          # every device registered (init() without a device list)
_attempted: set[str] = set()   # built-in registry entries init() has tried to register
_plugins_tried = False         # out-of-tree devices looked for


def init(devices: Sequence[str] | None = None) -> None:
    """Register the devices of the generated registry, then the out-of-tree ones (idempotent).

    A device that cannot be registered (a missing package, an import error, a
    plugin's API version, an init hook that raises) is recorded as unavailable
    with the reason (see ``nnhal devices``); the others are registered.

    ``devices`` (names) registers only those built-in devices and the fallback for now, and looks for
    plugins only when a name is not built in; a later ``init()`` registers the rest. Sessions and
    contexts pass the devices they name: a CPU-only session then never opens a GPU adapter (the webgpu
    device's costs ~95 MB and ~0.7 s on lavapipe).
    """
    global _initialised, _plugins_tried
    with _lock:
        if _initialised:
            return
        try:
            from nnhal.registry import DEVICES
        except ImportError as exc:
            raise RegistryError("nnhal.registry is missing: the package was not built. Install it with "
                                "'pip install .' (or 'pip install -e .') so CMake renders the registry") from exc
        wanted = None if devices is None else {*devices, FALLBACK_DEVICE}
        for entry in DEVICES:
            if entry.name not in _attempted and (wanted is None or entry.name in wanted):
                _attempted.add(entry.name)
                register_builtin(entry)
        if not _plugins_tried and (wanted is None or wanted - {e.name for e in DEVICES}):
            _plugins_tried = True
            for plugin in discover_plugins():
                register_plugin(plugin)
        _initialised = wanted is None


def init_for(devices: Any) -> None:
    """init() for a context over ``devices``: only those (and the fallback) when it is a list of names;
    everything otherwise (the caller then reports what is wrong with it)."""
    if devices is None:
        init([])
    elif isinstance(devices, (list, tuple)) and all(isinstance(d, str) for d in devices):
        init(devices)
    else:
        init()


def register_builtin(entry: Any) -> None:
    """Check an enabled registry entry's packages, import its module and call its register function."""
    missing = [p for p in entry.packages if importlib.util.find_spec(p) is None]
    if missing:
        mark_unavailable(entry.name, BUILT_IN, API_VERSION,
                         f"needs the Python package(s) {', '.join(missing)}, which this Python cannot import: "
                         f"install them, or switch the device off with 'nnhal registry --disable {entry.name}'")
        return
    try:
        module = importlib.import_module(entry.module)
        getattr(module, entry.register)()
    except Exception as exc:
        mark_unavailable(entry.name, BUILT_IN, API_VERSION, f"{entry.module}.{entry.register}() failed: "
                         f"{type(exc).__name__}: {exc}")
        log.warning("nnhal: device '%s' is unavailable: %s", entry.name, exc)
        return
    if entry.name not in {d.name for d in registered_devices()}:
        mark_unavailable(entry.name, BUILT_IN, API_VERSION,
                         f"{entry.module}.{entry.register}() did not register a device named '{entry.name}'")
        return
    _registered.append((entry.name, getattr(module, entry.unregister)))


def register_plugin(plugin: Any) -> None:
    """Load an out-of-tree device and register it; on any failure record why it is unavailable."""
    loaded = load_plugin(plugin)
    reason = loaded.reason
    if loaded.device is not None:
        try:
            register_device(loaded.device, origin=plugin.origin, api=loaded.api)
        except RegistryError as exc:
            reason = str(exc)
    if reason:
        mark_unavailable(plugin.name, plugin.origin, loaded.api, reason)
        log.warning("nnhal: device '%s' (%s) is unavailable: %s", plugin.name, plugin.origin, reason)
        return
    _registered.append((plugin.name, lambda name=plugin.name: unregister_device(name)))


def release() -> None:
    """Unregister the devices init() registered, in reverse order, and forget the unavailable ones."""
    global _initialised, _plugins_tried
    with _lock:
        while _registered:
            _, unregister = _registered.pop()
            unregister()
        clear_unavailable()
        _attempted.clear()
        _initialised = _plugins_tried = False


def device_status() -> list[DeviceStatus]:
    """Every device init() saw, registered or unavailable (with the reason), and those registered since."""
    require_init()
    return manager_status()


def require_init() -> None:
    if not _initialised:
        init()


def initialised() -> bool:
    """Whether every device has been registered (init() without a device list ran)."""
    return _initialised
