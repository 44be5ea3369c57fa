"""BlackmanWindow: the Blackman window of a given size, periodic or symmetric."""
from __future__ import annotations

from nnhal.operator._reduce import WindowPrototype


class BlackmanWindow(WindowPrototype):
    op_type = "BlackmanWindow"
