"""The records of a batch job: what runs (JobSpec), a part of the input (Part), what was done (JobReport)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class JobSpec:
    """Everything a job needs, picklable: what runs (model and Session options) and what is read."""

    model: str
    kind: str                                   # "image", "npz" or "parquet"
    devices: tuple[str, ...] = ("cpu",)
    precision: str = "fp32"
    threads: int = 1
    batch_size: int | None = None
    on_error: str = "skip"
    key_column: str | None = None
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)


@dataclass(frozen=True)
class Part:
    """Rows ``start:stop`` of each listed file, in order: one output file."""

    index: int
    items: tuple[tuple[str, int, int], ...]

    @property
    def rows(self) -> int:
        return sum(stop - start for _, start, stop in self.items)

    @property
    def name(self) -> str:
        return f"part-{self.index:05d}.parquet"


@dataclass
class JobReport:
    """What a job did: parts skipped (complete before), parts written now, rows run and rows failed;
    where the parts ran (Ray node ID -> parts written there) and the attempts of a part that were lost
    (node ID -> attempts that started there and never finished: an actor or its node died, and Ray ran
    the part again)."""

    parts: int
    skipped: int
    written: int = 0
    rows: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    nodes: dict[str, int] = field(default_factory=dict)
    lost: dict[str, int] = field(default_factory=dict)
    node_notes: dict[str, str] = field(default_factory=dict)    # node ID -> "IP, head" / "IP, lost"

    @property
    def retries(self) -> int:
        """Part attempts that were lost and run again."""
        return sum(self.lost.values())
