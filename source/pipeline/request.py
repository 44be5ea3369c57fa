"""The Request: what one prepare is asked for. Every stage may read it; none changes it."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnhal.graph.graph import Graph
from nnhal.options import Options
from nnhal.pipeline.context import Context


@dataclass(frozen=True)
class Request:
    graph: Graph                        # the imported graph (the stages work on a copy)
    inputs: dict[str, np.ndarray]       # the bound inputs: their dtypes and shapes specialise the copy
    context: Context                    # the devices, in priority order, with their options, pins, denials
    options: Options
