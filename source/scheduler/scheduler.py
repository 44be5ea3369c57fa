"""The Scheduler record and the state of one graph's execution.

A prepared graph holds one :class:`Execution` (subgraphs, devices, options),
shared by every run. Each run works on :meth:`Execution.begin`'s copy, whose
value store, scheduler state and subgraph views are that run's own, so one
prepared graph is run from many threads at once.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from nnhal.graph.subgraph import Subgraph


@dataclass
class Execution:
    """Everything a scheduler needs to drive one graph: subgraphs, devices, the value store.

    ``values``, ``state`` and ``views`` belong to one run (see :meth:`begin`); the rest is the
    prepared graph's, shared by its runs. ``fallback`` names the device a failing subgraph is
    re-placed on (None: strict, no fallback). ``lock`` guards the shared part when a run changes it
    (a fallback re-places a subgraph).
    """

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
    fallback: str | None = None
    views: dict[int, Subgraph] = field(default_factory=dict)   # this run's view of each started subgraph
    allocated: set[int] = field(default_factory=set)   # subgraphs whose allocator.allocate succeeded
    prepared: set[int] = field(default_factory=set)    # subgraphs whose pre_run succeeded
    lock: Any = field(default_factory=threading.RLock, repr=False)
    reentrant: dict[str, bool] = field(default_factory=dict)   # device name -> Description.reentrant
    reuses: dict[str, bool] = field(default_factory=dict)      # device name -> Description.reuses_outputs
    _deps: dict[int, set[int]] | None = field(default=None, repr=False)
    _users: dict[int, list[int]] | None = field(default=None, repr=False)

    def begin(self, values: dict[str, np.ndarray]) -> "Execution":
        """The execution of one run: shares the prepared part, owns ``values``, ``state`` and ``views``."""
        if self._users is None:                  # users() computes dependencies() first: both once
            self.users()
        run = object.__new__(Execution)          # a shallow copy, as copy.copy made, without its protocol lookups
        run.__dict__.update(self.__dict__)
        run.values = values
        run.state = None
        run.views = {}
        return run

    def is_reentrant(self, device: str) -> bool:
        """Whether ``device`` may be entered by concurrent runs (its Description, read once)."""
        known = self.reentrant.get(device)
        if known is None:
            known = self.reentrant[device] = bool(getattr(self.devices[device].describe(), "reentrant", False))
        return known

    def reuses_outputs(self, device: str) -> bool:
        """Whether ``device`` may overwrite its output arrays in a later run (the core then copies them)."""
        known = self.reuses.get(device)
        if known is None:
            known = self.reuses[device] = bool(getattr(self.devices[device].describe(), "reuses_outputs", False))
        return known

    def dependencies(self) -> dict[int, set[int]]:
        """Subgraph index -> indices of subgraphs producing its inputs (computed once: a fallback
        changes a subgraph's device, never its boundary)."""
        if self._deps is None:
            producer = {name: sg.index for sg in self.subgraphs for name in sg.outputs}
            self._deps = {sg.index: {producer[n] for n in sg.inputs if n in producer and producer[n] != sg.index}
                          for sg in self.subgraphs}
        return self._deps

    def users(self) -> dict[int, list[int]]:
        """Subgraph index -> the subgraphs reading its outputs (computed once)."""
        if self._users is None:
            users: dict[int, list[int]] = {}
            for i, d in self.dependencies().items():
                for j in d:
                    users.setdefault(j, []).append(i)
            self._users = users
        return self._users


@dataclass(frozen=True)
class Scheduler:
    """How subgraphs are prepared and run.

    prerun(execution)                         allocate and pre_run every subgraph
    run(execution, block)                     run the subgraphs in dependency order
    wait(execution, timeout) -> bool          True when the run started by run() has finished
    postrun(execution)                        post_run and release every subgraph
    direct(execution, outputs) -> run | None  optional, decided once: a blocking run as one call, run(a run's
                                              execution) -> outputs, or None: run() then (see default._direct)
    """

    name: str
    prerun: Callable[[Execution], None]
    run: Callable[[Execution, bool], None]
    wait: Callable[[Execution, float | None], bool]
    postrun: Callable[[Execution], None]
    direct: Callable[[Execution, list], Callable[[Execution], list | None] | None] | None = None
