"""What one conformance case came to: its status and the record of it. The runner produces them, the
report reads them; both import this module and neither imports the other's internals."""
from __future__ import annotations

from dataclasses import dataclass, field

PASS, WRONG, UNSUPPORTED, ERROR = "pass", "wrong", "unsupported", "error"
FALLBACK = "fallback"     # passed, but some nodes ran elsewhere than on the validated device


@dataclass
class CaseResult:
    name: str
    ops: list[str]
    status: str
    reason: str = ""
    seconds: float = 0.0
    placement: dict[str, str] = field(default_factory=dict)
    # op types with at least one node that ran elsewhere than on the validated device (status fallback)
    fell_back: list[str] = field(default_factory=list)
