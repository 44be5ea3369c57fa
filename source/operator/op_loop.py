"""Loop: iterate a body with loop-carried values and per-iteration scan outputs."""
from __future__ import annotations

import numpy as np

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator._qrc import body_attr, carried_fixpoint, implicit_infos, require_dtypes
from nnhal.operator.base import REQUIRED, Info, Prototype


class Loop(Prototype):
    op_type = "Loop"
    versions = (1, 11, 13, 16, 19, 21, 23, 24, 25)
    attributes = {"body": REQUIRED}
    # NOTE: M and cond are optional but positional; a loop with M only has one named input.
    inputs = (1, -1)
    outputs = (0, -1)

    def carried(self, node: Node) -> int:
        return max(0, len(node.inputs) - 2)

    def check(self, node: Node) -> None:
        body = body_attr(node, "body")
        n = self.carried(node)
        if len(body.inputs) != 2 + n:
            raise ModelError(f"{where(node)}: body takes {len(body.inputs)} inputs; expected 2 + {n} loop-carried")
        if len(body.outputs) < 1 + n:
            raise ModelError(f"{where(node)}: body gives {len(body.outputs)} outputs; expected at least 1 + {n}")
        k = len(body.outputs) - 1 - n
        if len(node.outputs) != n + k:
            raise ModelError(f"{where(node)}: node has {len(node.outputs)} outputs; body gives {n} loop-carried "
                             f"and {k} scan outputs")

    def trip_count(self, node: Node, ins: list[Info | None]) -> int | None:
        """The number of iterations when it is known before the run."""
        m = ins[0] if ins else None
        cond_given = len(node.inputs) > 1 and bool(node.inputs[1])
        if m is None or m.value is None or cond_given:
            return None
        return max(0, int(np.asarray(m.value).reshape(())))

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        body = node.attrs["body"]
        n = self.carried(node)
        initial = [ins[2 + i] if ins[2 + i] is not None else Info(None, None) for i in range(n)]
        head = [Info(np.dtype(np.int64), ()), Info(np.dtype(np.bool_), ())]
        state, outs = carried_fixpoint(body, head, initial, [], implicit_infos(node, ins), 1)
        trips = self.trip_count(node, ins)
        scans = []
        for o in outs[1 + n:]:
            shape = None if o.shape is None else (trips, *o.shape)
            scans.append(Info(o.dtype, shape))
        return require_dtypes(node, state + scans)
