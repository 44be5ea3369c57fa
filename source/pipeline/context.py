"""The Context: which devices a graph may use, in priority order, with their options, pins and denials."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nnhal.device.loading import init
from nnhal.device.manager import FALLBACK_DEVICE, find_device
from nnhal.errors import DeviceError, OptionsError
from nnhal.options import validate_device_options


@dataclass
class Context:
    """An ordered device list (the fallback device appended unless strict) and their options."""

    name: str
    devices: list[str]
    device_options: dict[str, Any]
    strict: bool = False
    pins: dict[str, str] = field(default_factory=dict)
    deny: dict[str, list[str]] = field(default_factory=dict)

    @property
    def fallback(self) -> str | None:
        """Where a failing subgraph is re-placed; None when strict."""
        return None if self.strict or FALLBACK_DEVICE not in self.devices else FALLBACK_DEVICE


def _names(value: Any, what: str) -> list[str]:
    """A list of names from a list or tuple of str; a bare string or anything else is an OptionsError."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)) \
            or not all(isinstance(v, str) and v for v in value):
        raise OptionsError(f"{what} must be a list of names (e.g. ['a', 'b']), got {value!r}")
    return list(value)


def make_context(name: str, devices: list[str] | None, device_options: dict[str, dict] | None, strict: bool,
                 pins: dict[str, str] | None, deny: dict[str, list[str]] | None) -> Context:
    """The Context of create_context's arguments, every one checked: the devices registered, each named
    once, the fallback appended unless strict; device options typed by each device's own dataclass;
    pins and denials naming devices of the context."""
    if not isinstance(name, str):
        raise OptionsError(f"the context name must be a str, got {name!r}")
    if not isinstance(strict, bool):
        raise OptionsError(f"strict must be True or False, got {strict!r}")
    names = _names(devices, "devices") if devices is not None else [FALLBACK_DEVICE]
    if not names:
        raise OptionsError("devices is empty; name at least one device (e.g. ['{FALLBACK_DEVICE}'])")
    for n in names:
        try:
            find_device(n)
        except DeviceError:
            init()              # every device registered, so the error lists them all
            find_device(n)
    if len(set(names)) != len(names):
        raise DeviceError(f"device list {names} names a device twice")
    if not strict and FALLBACK_DEVICE not in names:
        names.append(FALLBACK_DEVICE)
    if device_options is not None and not isinstance(device_options, dict):
        raise OptionsError(f"device_options must be a dict of device name -> dict of options, got {device_options!r}")
    device_options = dict(device_options or {})
    for dev, opts in device_options.items():
        if dev not in names:
            raise DeviceError(f"device_options names '{dev}', which is not in the context's devices {names}")
        if opts is not None and not isinstance(opts, dict):
            raise OptionsError(f"device_options['{dev}'] must be a dict of options, got {opts!r}")
    typed = {n: validate_device_options(n, find_device(n).describe().options, device_options.get(n)) for n in names}
    if pins is not None and not isinstance(pins, dict):
        raise OptionsError(f"pins must be a dict of node name -> device name, got {pins!r}")
    for node, target in (pins or {}).items():
        if not isinstance(node, str) or not isinstance(target, str):
            raise OptionsError(f"pins must map node names to device names (str -> str), got {node!r}: {target!r}")
        if target not in names:
            raise DeviceError(f"the pin of node '{node}' names device '{target}', which is not in the context's "
                              f"devices {names}")
    if deny is not None and not isinstance(deny, dict):
        raise OptionsError(f"deny must be a dict of node name -> list of device names, got {deny!r}")
    denied = {}
    for node, targets in (deny or {}).items():
        if not isinstance(node, str):
            raise OptionsError(f"deny must be keyed by node names (str), got {node!r}")
        denied[node] = _names(targets, f"deny['{node}']")
        for target in denied[node]:
            if target not in names:
                raise DeviceError(f"deny['{node}'] names device '{target}', which is not in the context's "
                                  f"devices {names}")
    return Context(name, names, typed, strict, dict(pins or {}), denied)
