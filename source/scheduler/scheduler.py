"""The Scheduler record and the state of one graph's execution."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from nnhal.graph.subgraph import Subgraph


@dataclass
class Execution:
    """Everything a scheduler needs to drive one graph: subgraphs, devices, the value store."""

    subgraphs: list[Subgraph]
    devices: dict[str, Any]                 # device name -> Device
    options: Any                            # nnhal.Options
    values: dict[str, np.ndarray] = field(default_factory=dict)
    report: list = field(default_factory=list)         # fallbacks and other events
    state: Any = None                       # the scheduler's own run state
    graph: Any = None                       # the prepared graph: host dtypes of boundary tensors
    # subgraph index -> seconds spent running it, summed over runs, when profiling (else None); a
    # scheduler adds each subgraph's wall time from its start to its completion
    timings: dict[int, float] | None = None
    _deps: dict[int, set[int]] | None = field(default=None, repr=False)
    _users: dict[int, list[int]] | None = field(default=None, repr=False)

    def dependencies(self) -> dict[int, set[int]]:
        """Subgraph index -> indices of subgraphs producing its inputs (computed once: a fallback
        changes a subgraph's device, never its boundary)."""
        if self._deps is None:
            producer = {name: sg.index for sg in self.subgraphs for name in sg.outputs}
            self._deps = {sg.index: {producer[n] for n in sg.inputs if n in producer and producer[n] != sg.index}
                          for sg in self.subgraphs}
        return self._deps


@dataclass(frozen=True)
class Scheduler:
    """How subgraphs are prepared and run.

    prerun(execution)                         allocate and pre_run every subgraph
    run(execution, block)                     run the subgraphs in dependency order
    wait(execution, timeout) -> bool          True when the run started by run() has finished
    postrun(execution)                        post_run and release every subgraph
    """

    name: str
    prerun: Callable[[Execution], None]
    run: Callable[[Execution, bool], None]
    wait: Callable[[Execution, float | None], bool]
    postrun: Callable[[Execution], None]
