"""Session: the one-object way to run a model."""
from __future__ import annotations

from typing import Any

import numpy as np

from nnhal import api
from nnhal.options import MAX_FOLD_BYTES, MAX_GRAPH_BYTES, MAX_LOOP_TRIPS, Options


class Session:
    """Import, prepare and run a model on a device list.

        with nnhal.Session("model.onnx", devices=["cpu"]) as s:
            outputs = s.run({"data": x})

    ``base_dir``: the folder external-data files of a model given as bytes or a ModelProto resolve in.
    ``max_fold_bytes``, ``max_loop_trips``, ``max_graph_bytes``: the bounds on prepare (see Options).
    """

    def __init__(self, model: Any, devices: list[str] | None = None, precision: str = "fp32",
                 num_thread: int = 0, device_options: dict[str, dict] | None = None, strict: bool = False,
                 pins: dict[str, str] | None = None, deny: dict[str, list[str]] | None = None,
                 min_group_size: int = 1, calibration: dict | None = None, mixed_tolerance: float = 0.01,
                 name: str = "session", base_dir: str | None = None, max_fold_bytes: int = MAX_FOLD_BYTES,
                 max_loop_trips: int = MAX_LOOP_TRIPS, max_graph_bytes: int = MAX_GRAPH_BYTES) -> None:
        api.init()
        self.options = Options(num_thread=num_thread, precision=precision, strict=strict,
                               min_group_size=min_group_size, calibration=calibration,
                               mixed_tolerance=mixed_tolerance, max_fold_bytes=max_fold_bytes,
                               max_loop_trips=max_loop_trips, max_graph_bytes=max_graph_bytes)
        self.context = api.create_context(name, devices, device_options, strict, pins, deny)
        self.graph = api.create_graph(self.context, "onnx", model, base_dir)

    @property
    def input_names(self) -> list[str]:
        return self.graph.input_names

    @property
    def output_names(self) -> list[str]:
        return self.graph.output_names

    def run(self, feeds: dict[str, Any] | list[Any]) -> list[np.ndarray]:
        """Outputs for ``feeds`` (name -> array, or arrays in input order), in graph output order."""
        items = feeds.items() if isinstance(feeds, dict) else enumerate(feeds)
        for key, value in items:
            api.set_graph_input(self.graph, key, value)
        if self.graph.state is api.GraphState.CREATED:
            api.prerun_graph(self.graph, self.options)
        api.run_graph(self.graph, block=True)
        return [api.get_graph_output(self.graph, i) for i in range(len(self.graph.output_names))]

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
    def placement(self) -> dict[str, Any]:
        """Node name -> placement decision (device and reasons) of the last prerun."""
        return dict(self.graph.placement)

    def report(self):
        """Placement with reasons, subgraphs, boundary tensors and bytes, fallbacks (after the first run)."""
        return api.report(self.graph)

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
