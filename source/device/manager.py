"""Registered devices: register, unregister, look up by name, and why a device is unavailable.

``register_device`` checks the whole record before anything changes: a
registration that fails (a malformed record, an ``init`` hook that raises, a
``describe`` that returns something else than a Description) leaves the
registry as it was. Devices that could not be registered at ``nnhal.init()``
are kept in a status table with the reason, so that ``find_device`` and
``nnhal devices`` can say why.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, fields

from nnhal.device.device import (
    API_VERSION,
    NAME_PATTERN,
    PRECISIONS,
    Allocator,
    Description,
    Device,
    Interface,
    Optimizer,
    newer_than_declared,
)
from nnhal.errors import DeviceError, RegistryError, did_you_mean
from nnhal.hostkernels.graphrun import Compiler, interpret

log = logging.getLogger("nnhal")

_DEVICES: dict[str, Device] = {}
_STATUS: dict[tuple[str, str], "DeviceStatus"] = {}   # (name, origin) -> status

BUILT_IN = "built-in"

# NOTE: the one place the core names a device: the device that is always registered and takes what no
# other device can. It is the default device list and, unless strict, the fallback appended to every
# context; placement, the default split and the scheduler re-place onto it by this name.
FALLBACK_DEVICE = "cpu"


@dataclass(frozen=True)
class DeviceStatus:
    """One device nnhal knows of: where it comes from, the API it targets, whether it is usable.

    ``origin`` is "built-in", "entry point <dist>" or "path <file>"; ``api`` is
    the device API version it declares (None when it could not be read).
    """

    name: str
    origin: str
    api: tuple[int, int] | None
    available: bool
    reason: str = ""


def _check_hooks(owner: str, table: object, expected: type) -> None:
    """The table is the dataclass expected and every filled hook in it is callable."""
    if not isinstance(table, expected):
        raise RegistryError(f"{owner}: {expected.__name__.lower()} must be a nnhal {expected.__name__} record, "
                            f"got {type(table).__name__}")
    for f in fields(table):
        if f.name == "name":
            continue
        hook = getattr(table, f.name)
        if hook is not None and not callable(hook):
            raise RegistryError(f"{owner}: {expected.__name__.lower()}.{f.name} must be a function, "
                                f"got {type(hook).__name__}")


def validate_device(device: Device) -> None:
    """Check a record without calling any of its hooks; RegistryError says what is wrong."""
    if not isinstance(device, Device):
        raise RegistryError(f"register_device needs a nnhal Device record, got {type(device).__name__}")
    if not isinstance(device.name, str) or not NAME_PATTERN.match(device.name):
        raise RegistryError(f"device name {device.name!r} is not lower-case letters and digits ([a-z0-9]+)")
    owner = f"device '{device.name}'"
    _check_hooks(owner, device.interface, Interface)
    if device.interface.run is None:
        raise RegistryError(f"{owner} has no interface.run hook; it is the one required hook")
    if (device.interface.async_run is None) != (device.interface.async_wait is None):
        given, missing = ("async_run", "async_wait") if device.interface.async_wait is None \
            else ("async_wait", "async_run")
        raise RegistryError(f"{owner} fills interface.{given} but not interface.{missing}: the two come in a pair")
    # NOTE: placement asks describe() which ops a device takes; without it no node could ever be placed on
    # the device, so an allocator with describe is required rather than optional.
    if device.allocator is None:
        raise RegistryError(f"{owner} has no allocator: fill Allocator(describe=...) so that placement knows "
                            "which ops and precisions the device takes")
    _check_hooks(owner, device.allocator, Allocator)
    if device.allocator.describe is None:
        raise RegistryError(f"{owner} has no allocator.describe hook: placement cannot put any node on it")
    if device.optimizer is not None:
        _check_hooks(owner, device.optimizer, Optimizer)
    if device.scheduler is not None:
        # NOTE: checked by its fields, not its class: the Scheduler record lives a layer above this module
        missing = [f for f in ("prerun", "run", "wait", "postrun") if not callable(getattr(device.scheduler, f, None))]
        if missing:
            raise RegistryError(f"{owner}: its scheduler lacks a callable {', '.join(missing)}; "
                                "a scheduler fills all of prerun, run, wait and postrun")


def check_description(device: Device) -> Description:
    """Call ``describe`` once and check what it returns (a Description of known precisions)."""
    owner = f"device '{device.name}'"
    try:
        desc = device.allocator.describe(device)
    except Exception as exc:
        raise RegistryError(f"{owner}: describe hook failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(desc, Description):
        raise RegistryError(f"{owner}: describe must return a nnhal Description, got {type(desc).__name__}")
    if not isinstance(desc.ops, (set, frozenset)) or not all(isinstance(op, str) for op in desc.ops):
        raise RegistryError(f"{owner}: Description.ops must be a frozenset of op type names, got {desc.ops!r}")
    unknown = [p for p in desc.precisions if p not in PRECISIONS]
    if not desc.precisions or unknown:
        raise RegistryError(f"{owner}: Description.precisions {tuple(desc.precisions)} must be a non-empty "
                            f"tuple of {PRECISIONS}")
    return desc


def register_device(device: Device, origin: str = BUILT_IN, api: tuple[int, int] = API_VERSION) -> None:
    """Validate a device, call its ``init`` hook and add it. On any failure nothing changes.

    ``origin`` and ``api`` are recorded for ``nnhal devices`` (plugins are
    registered by nnhal.init() with their own).
    """
    validate_device(device)
    if device.name in _DEVICES:
        raise RegistryError(f"a device named '{device.name}' is already registered")
    if device.interface.init is not None:
        try:
            device.interface.init(device)
        except Exception as exc:
            raise RegistryError(f"device '{device.name}': init hook failed: {type(exc).__name__}: {exc}") from exc
    try:
        check_description(device)
    except RegistryError:
        _undo_init(device)
        raise
    newer = newer_than_declared(device, api)
    if newer:
        log.warning("nnhal: device '%s' declares device API %d.%d but fills %s: declare the version it was "
                    "written against", device.name, api[0], api[1], ", ".join(newer))
    _DEVICES[device.name] = device
    _STATUS[(device.name, origin)] = DeviceStatus(device.name, origin, tuple(api), True)


def _undo_init(device: Device) -> None:
    """Undo a successful init after a later check failed (its release_device hook)."""
    if device.interface.release_device is not None:
        try:
            device.interface.release_device(device)
        except Exception:  # the registration already fails with the first error
            pass


def mark_unavailable(name: str, origin: str, api: tuple[int, int] | None, reason: str) -> None:
    """Record a device that could not be registered, and why (shown by find_device and `nnhal devices`)."""
    if _STATUS.get((name, origin), DeviceStatus(name, origin, api, False)).available:
        return
    _STATUS[(name, origin)] = DeviceStatus(name, origin, api, False, reason)


def clear_unavailable() -> None:
    """Forget the devices that could not be registered (nnhal.release(); a later init() tries again)."""
    for key in [k for k, status in _STATUS.items() if not status.available]:
        del _STATUS[key]


def device_status() -> list[DeviceStatus]:
    """Every device nnhal knows of, registered or not, in the order they were seen."""
    return list(_STATUS.values())


def unregister_device(name: str) -> None:
    """Remove a device and call its ``release_device`` hook."""
    device = find_device(name)
    del _DEVICES[name]
    for key in [k for k, status in _STATUS.items() if k[0] == name and status.available]:
        del _STATUS[key]
    if device.interface.release_device is not None:
        device.interface.release_device(device)


def find_device(name: str) -> Device:
    """The registered device of that name; DeviceError says why it is unavailable, or lists the others."""
    try:
        return _DEVICES[name]
    except (KeyError, TypeError):
        pass
    why = [f"{s.origin}: {s.reason}" for s in _STATUS.values() if s.name == name and not s.available]
    if why:
        raise DeviceError(f"device '{name}' is unavailable ({'; '.join(why)})")
    known = list(_DEVICES)
    raise DeviceError(f"no device named '{name}' is registered (registered: {', '.join(known) or 'none'})"
                      f"{did_you_mean(name, known)}")


def registered_devices() -> list[Device]:
    """Registered devices in registration order."""
    return list(_DEVICES.values())


def graph_compiler() -> Compiler:
    """The compiler of the optimizer's fp32 runs of host-kernel graphs (calibration, sensitivities): the
    ``compile_graph`` hook of the first registered device that fills it (the cpu device's plan), else the
    plain interpreter of host kernels (the same results, slower)."""
    for device in _DEVICES.values():
        compiler = getattr(device.optimizer, "compile_graph", None)
        if compiler is not None:
            return compiler
    return interpret
