"""Default bounds on prepare (a model is untrusted input): generous enough that no real model meets them.

Options (max_fold_bytes, max_loop_trips, max_graph_bytes) override them per prerun."""
from __future__ import annotations

MAX_FOLD_BYTES = 256 << 20      # the largest tensor constant folding materialises
MAX_LOOP_TRIPS = 1 << 16        # the largest Loop trip count folding runs
MAX_GRAPH_BYTES = 16 << 30      # the tensors a prepared graph may allocate
