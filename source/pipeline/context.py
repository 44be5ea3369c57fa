"""The Context: which devices a graph may use, in priority order, with their options, pins and denials."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nnhal.device.manager import FALLBACK_DEVICE


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
