"""Session: the one-object way to run a model."""
from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from nnhal import api
from nnhal.optimizer.placement import Decision
from nnhal.optimizer.report import actual_decisions, decision_table
from nnhal.options import MAX_FOLD_BYTES, MAX_GRAPH_BYTES, MAX_LOOP_TRIPS, Options


class Placement(Mapping):
    """Node name -> Decision (device, reason, declined devices), in graph order; a read-only dict.

    ``print(session.placement)`` shows a table (node, op, device, reason); ``placement["conv1"].device``
    and ``dict(placement)`` work as on the dict it wraps. After a fallback it shows where nodes ran."""

    def __init__(self, decisions: dict[str, Decision]) -> None:
        self._decisions = dict(decisions)

    def __getitem__(self, node: str) -> Decision:
        return self._decisions[node]

    def __iter__(self) -> Iterator[str]:
        return iter(self._decisions)

    def __len__(self) -> int:
        return len(self._decisions)

    def devices(self) -> dict[str, int]:
        """Device -> number of nodes placed on it."""
        counts: dict[str, int] = {}
        for d in self._decisions.values():
            counts[d.device] = counts.get(d.device, 0) + 1
        return counts

    def __str__(self) -> str:
        if not self._decisions:
            return "placement: none yet (the graph is placed at its first run)"
        head = ", ".join(f"{dev} {n}" for dev, n in self.devices().items())
        return "\n".join([f"placement of {len(self)} nodes: {head}", *decision_table(list(self.values()))])

    def __repr__(self) -> str:
        return f"<Placement of {len(self)} nodes: {self.devices()}>\n{self}"


class Session:
    """Import, prepare and run a model on a device list.

    ``model``: a path, bytes, an onnx.ModelProto, or ``"zoo:<name>[?weights=random&seed=N]"`` (a model of
    the onnx wheel's light zoo, see nnhal.zoo), as ``nnhal run`` takes it.

        with nnhal.Session("model.onnx", devices=["cpu"]) as s:
            outputs = s.run({"data": x})

    ``base_dir``: the folder external-data files of a model given as bytes or a ModelProto resolve in.
    ``max_fold_bytes``, ``max_loop_trips``, ``max_graph_bytes``: the bounds on prepare (see Options).
    ``shape_cache``: how many input shapes stay prepared (an LRU, see Options and docs/concurrency.md);
    ``placement``, ``report()``, ``subgraphs``, ``fallbacks``, ``quantization`` and ``mixed`` describe the
    input shapes prepared (or profiled) last.
    """

    def __init__(self, model: Any, devices: list[str] | None = None, precision: str = "fp32",
                 num_thread: int = 0, device_options: dict[str, dict] | None = None, strict: bool = False,
                 pins: dict[str, str] | None = None, deny: dict[str, list[str]] | None = None,
                 min_group_size: int = 1, calibration: Any = None, mixed_tolerance: float = 0.01,
                 name: str = "session", prefer: str = "order", base_dir: str | None = None,
                 max_fold_bytes: int = MAX_FOLD_BYTES, max_loop_trips: int = MAX_LOOP_TRIPS,
                 max_graph_bytes: int = MAX_GRAPH_BYTES, compiled_cache: str | os.PathLike | None = None,
                 shape_cache: int = 4) -> None:
        if isinstance(model, str) and model.startswith("zoo:"):
            from nnhal.zoo import resolve

            model = resolve(model)    # the model zoo of the onnx wheel, as on the command line
        self.options = Options(num_thread=num_thread, precision=precision, strict=strict,
                               min_group_size=min_group_size, calibration=calibration,
                               mixed_tolerance=mixed_tolerance, prefer=prefer, max_fold_bytes=max_fold_bytes,
                               max_loop_trips=max_loop_trips, max_graph_bytes=max_graph_bytes,
                               shape_cache=shape_cache)
        self.context = api.create_context(name, devices, device_options, strict, pins, deny)
        # compiled_cache: a directory of the user's own keeping imported models (nnhal.serializer.cache)
        self.graph = api.create_graph(self.context, "onnx", model, base_dir, compiled_cache)

    @property
    def input_names(self) -> list[str]:
        return self.graph.input_names

    @property
    def output_names(self) -> list[str]:
        return self.graph.output_names

    def run(self, feeds: dict[str, Any] | list[Any]) -> list[np.ndarray]:
        """Outputs for ``feeds`` (name -> array, or arrays in input order), in graph output order.

        Thread-safe: one Session may be run from many threads at once; each run has its own tensors
        (as ONNX Runtime's ``InferenceSession.run`` and NNAPI's executions of one prepared model)."""
        return api.execute(self.graph, feeds, self.options)

    def profile(self, feeds: dict[str, Any] | list[Any], runs: int = 10, warmup: int = 1):
        """Run ``feeds`` ``warmup`` + ``runs`` times and return where the timed runs spent their time, per
        subgraph and per node (nnhal.Profile; ``.table()`` renders it)."""
        items = feeds.items() if isinstance(feeds, dict) else enumerate(feeds)
        for key, value in items:
            api.set_graph_input(self.graph, key, value)
        if self.graph.state is api.GraphState.CREATED:
            api.prerun_graph(self.graph, self.options)
        return api.profile(self.graph, runs, warmup)

    @property
    def placement(self) -> Placement:
        """Node name -> placement decision (device and reasons) of the input shapes prepared last, as the nodes ran:
        a subgraph that fell back shows its nodes on the fallback device. Printable as a table."""
        ex = self.graph.execution
        if ex is None:
            return Placement(self.graph.placement)
        return Placement(actual_decisions(self.graph.placement, ex.subgraphs, ex.report))

    def report(self):
        """Placement with reasons, subgraphs, boundary tensors and bytes, fallbacks (after the first run)."""
        return api.report(self.graph)

    @property
    def quantization(self):
        """Under int8/uint8: per node what stays float32, what is quantized statically or per token, and
        why (an Int8Plan: ``.choices``, ``.table()``); None for other precisions."""
        return self.graph.int8_plan

    @property
    def mixed(self):
        """What precision="mixed" chose (None for other precisions)."""
        return self.graph.mixed_report

    @property
    def fallbacks(self) -> list:
        """Subgraphs that failed on their device and were re-placed on the CPU."""
        ex = self.graph.execution
        return list(ex.report) if ex is not None else []

    @property
    def subgraphs(self) -> list:
        ex = self.graph.execution
        return list(ex.subgraphs) if ex is not None else []

    def close(self) -> None:
        if self.graph.state is not api.GraphState.DESTROYED:
            api.destroy_graph(self.graph)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
