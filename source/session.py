"""Session: the one-object way to run a model."""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from nnhal import api
from nnhal.options import Options


class Session:
    """Import, prepare and run a model on a device list.

        with nnhal.Session("model.onnx", devices=["cpu"]) as s:
            outputs = s.run({"data": x})
    """

    def __init__(self, model: Any, devices: list[str] | None = None, precision: str = "fp32",
                 num_thread: int = 0, device_options: dict[str, dict] | None = None, strict: bool = False,
                 pins: dict[str, str] | None = None, deny: dict[str, list[str]] | None = None,
                 min_group_size: int = 1, calibration: Any = None, mixed_tolerance: float = 0.01,
                 name: str = "session", compiled_cache: str | os.PathLike | None = None) -> None:
        api.init()
        self.options = Options(num_thread=num_thread, precision=precision, strict=strict,
                               min_group_size=min_group_size, calibration=calibration,
                               mixed_tolerance=mixed_tolerance)
        self.context = api.create_context(name, devices, device_options, strict, pins, deny)
        # compiled_cache: a directory of the user's own keeping imported models (nnhal.serializer.cache)
        self.graph = api.create_graph(self.context, "onnx", model, compiled_cache)

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
