"""HannWindow: the Hann (raised cosine) window of a given size, periodic or symmetric."""
from __future__ import annotations

from nnhal.operator._reduce import WindowPrototype


class HannWindow(WindowPrototype):
    op_type = "HannWindow"
