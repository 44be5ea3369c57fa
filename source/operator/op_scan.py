"""Scan: iterate a body over slices of scan inputs, carrying state and stacking scan outputs."""
from __future__ import annotations

from typing import Any

from nnhal.errors import ModelError, where
from nnhal.graph.node import Node
from nnhal.operator._qrc import body_attr, carried_fixpoint, implicit_infos, require_dtypes
from nnhal.operator.base import REQUIRED, Info, Prototype


class Scan(Prototype):
    op_type = "Scan"
    versions = (8, 9, 11, 16, 19, 21, 23, 24, 25)
    inputs = (1, -1)
    outputs = (1, -1)

    def attributes_for(self, version: int) -> dict[str, Any]:
        if version == 8:
            return {"body": REQUIRED, "num_scan_inputs": REQUIRED, "directions": None}
        return {"body": REQUIRED, "num_scan_inputs": REQUIRED, "scan_input_directions": None,
                "scan_output_directions": None, "scan_input_axes": None, "scan_output_axes": None}

    def layout(self, node: Node) -> tuple[int, int, int]:
        """(first state input index, number of states, number of scan inputs)."""
        first = 1 if node.version == 8 else 0
        m = node.attrs["num_scan_inputs"]
        return first, len(node.inputs) - first - m, m

    def check(self, node: Node) -> None:
        body = body_attr(node, "body")
        first, n, m = self.layout(node)
        if any(not name for name in node.inputs[first:]):
            raise ModelError(f"{where(node)}: states and scan inputs must all be given; inputs are {node.inputs}")
        if m < 1 or n < 0:
            raise ModelError(f"{where(node)}: num_scan_inputs {m} does not fit {len(node.inputs)} inputs")
        if len(body.inputs) != n + m:
            raise ModelError(f"{where(node)}: body takes {len(body.inputs)} inputs; expected {n} states + {m} scan "
                             "inputs")
        if len(body.outputs) != len(node.outputs) or len(body.outputs) < n:
            raise ModelError(f"{where(node)}: body gives {len(body.outputs)} outputs; the node has {len(node.outputs)}")
        k = len(node.outputs) - n
        for name, count in (("scan_input_directions", m), ("scan_input_axes", m), ("directions", m),
                            ("scan_output_directions", k), ("scan_output_axes", k)):
            value = node.attrs.get(name)
            if value is not None and len(value) != count:
                raise ModelError(f"{where(node)}: {name} has {len(value)} values; expected {count}")

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        first, n, m = self.layout(node)
        states = [ins[first + i] or Info(None, None) for i in range(n)]
        scans = [ins[first + n + j] or Info(None, None) for j in range(m)]
        outer = implicit_infos(node, ins)
        if node.version == 8:
            return require_dtypes(node, self._infer_batched(node, states, scans, outer))
        in_axes = node.attrs["scan_input_axes"] or [0] * m
        slices, length = [], None
        for info, axis in zip(scans, in_axes):
            if info.shape is None:
                slices.append(Info(info.dtype, None))
                continue
            ax = self._axis(node, axis, len(info.shape))
            length = length if length is not None else info.shape[ax]
            slices.append(Info(info.dtype, info.shape[:ax] + info.shape[ax + 1:]))
        state, outs = carried_fixpoint(node.attrs["body"], [], states, slices, outer, 0)
        out_axes = node.attrs["scan_output_axes"] or [0] * (len(outs) - n)
        result = list(state)
        for o, axis in zip(outs[n:], out_axes):
            if o.shape is None:
                result.append(Info(o.dtype, None))
                continue
            ax = self._axis(node, axis, len(o.shape) + 1)
            result.append(Info(o.dtype, o.shape[:ax] + (length,) + o.shape[ax:]))
        return require_dtypes(node, result)

    def _infer_batched(self, node: Node, states: list[Info], scans: list[Info],
                       outer: dict[str, Info]) -> list[Info]:
        """Scan-8: every state and scan input has a leading batch axis; scan inputs then time."""
        batch = length = None
        for what, infos, rank in (("state", states, 1), ("scan input", scans, 2)):
            for s in infos:
                if s.shape is not None and len(s.shape) < rank:
                    raise self.fail(node, f"a {what} has rank {len(s.shape)}; Scan-8 needs at least {rank} "
                                          f"(batch{', sequence' if rank == 2 else ''})")
        for s in states + scans:
            if s.shape is not None and len(s.shape) >= 1 and batch is None:
                batch = s.shape[0]
        for s in scans:
            if s.shape is not None and len(s.shape) >= 2 and length is None:
                length = s.shape[1]
        inner = [Info(s.dtype, None if s.shape is None else s.shape[1:]) for s in states]
        slices = [Info(s.dtype, None if s.shape is None else s.shape[2:]) for s in scans]
        state, outs = carried_fixpoint(node.attrs["body"], [], inner, slices, outer, 0)
        n = len(states)
        result = [Info(s.dtype, None if s.shape is None else (batch, *s.shape)) for s in state]
        for o in outs[n:]:
            result.append(Info(o.dtype, None if o.shape is None else (batch, length, *o.shape)))
        return result

    def _axis(self, node: Node, axis: int, rank: int) -> int:
        if not -rank <= axis < rank:
            raise self.fail(node, f"axis {axis} is out of range for rank {rank}")
        return axis % rank
