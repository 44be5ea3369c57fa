"""The wall time of each prepare stage, as ``nnhal placement`` and ``nnhal profile`` show it."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass(frozen=True)
class StageTime:
    stage: str          # the stage's module name in nnhal.pipeline (import_model, placement, ...)
    seconds: float


@dataclass
class StageTimes:
    """Stage times in the order the stages ran (a stage that runs twice is listed twice)."""

    times: list[StageTime] = field(default_factory=list)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as stage ``name``; a stage that raises is timed too."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.times.append(StageTime(name, time.perf_counter() - t0))

    def pairs(self) -> list[tuple[str, float]]:
        """(stage, seconds) pairs: the plain values the reports below the pipeline take."""
        return [(t.stage, t.seconds) for t in self.times]
