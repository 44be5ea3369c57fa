"""Stage: import. A model (path, bytes or onnx.ModelProto) becomes nnhal's Graph, from the compiled cache
when one is given (see nnhal.serializer.cache)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from nnhal.graph.graph import Graph
from nnhal.scheduler.gcpause import gc_paused
from nnhal.serializer.cache import load_cached
from nnhal.serializer.onnx_import import load_onnx


@dataclass(frozen=True)
class ModelSource:
    model: Any                                      # a path, bytes or an onnx.ModelProto
    base_dir: str | None = None                     # where external data resolve for bytes / a ModelProto
    compiled_cache: str | os.PathLike | None = None  # a directory of the user's own, or None


def import_model(source: ModelSource) -> Graph:
    """The imported graph (tensors and nodes, topologically ordered), shapes not yet inferred."""
    with gc_paused():
        if source.compiled_cache is not None:
            return load_cached(source.model, source.compiled_cache, lambda m: load_onnx(m, source.base_dir))
        return load_onnx(source.model, source.base_dir)
