"""HammingWindow: the Hamming window (alpha = 25/46) of a given size, periodic or symmetric."""
from __future__ import annotations

from nnhal.operator._reduce import WindowPrototype


class HammingWindow(WindowPrototype):
    op_type = "HammingWindow"
