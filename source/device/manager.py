"""Registered devices: register, unregister, look up by name."""
from __future__ import annotations

import difflib

from nnhal.device.device import NAME_PATTERN, Device
from nnhal.errors import DeviceError, RegistryError

_DEVICES: dict[str, Device] = {}


def register_device(device: Device) -> None:
    """Add a device and call its ``init`` hook. Duplicate or malformed names are refused."""
    if not isinstance(device, Device):
        raise RegistryError(f"register_device needs a nnhal Device record, got {type(device).__name__}")
    if not NAME_PATTERN.match(device.name or ""):
        raise RegistryError(f"device name '{device.name}' is not lower-case letters and digits ([a-z0-9]+)")
    if device.name in _DEVICES:
        raise RegistryError(f"a device named '{device.name}' is already registered")
    if device.interface is None or device.interface.run is None:
        raise RegistryError(f"device '{device.name}' has no interface.run hook; it is the one required hook")
    if device.interface.init is not None:
        try:
            device.interface.init(device)
        except Exception as exc:
            raise RegistryError(f"device '{device.name}': init hook failed: {exc}") from exc
    _DEVICES[device.name] = device


def unregister_device(name: str) -> None:
    """Remove a device and call its ``release_device`` hook."""
    device = find_device(name)
    del _DEVICES[name]
    if device.interface.release_device is not None:
        device.interface.release_device(device)


def find_device(name: str) -> Device:
    """The registered device of that name; DeviceError lists the others and the closest."""
    try:
        return _DEVICES[name]
    except KeyError:
        pass
    known = list(_DEVICES)
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    raise DeviceError(f"no device named '{name}' is registered (registered: {', '.join(known) or 'none'}){hint}")


def registered_devices() -> list[Device]:
    """Registered devices in registration order."""
    return list(_DEVICES.values())
