"""Split on the cpu device into views: equal parts of a static tensor whose axes before the split axis are all
1, so that each part is one contiguous block of the input (the references: hostkernels/op_split.py). A GRU cell
splits its gate projections (1, 3H) this way once per step inside a recurrent body."""
from __future__ import annotations

from nnhal.hostkernels.base import Kernel, RunFn

MAX_OUTPUTS = 64


class SplitView(Kernel):
    """Each output a view of its block of the input (declared views: the planner keeps the input alive while
    any part is read). Equal parts only, so that an element-wise step writing in place of a part whose input
    dies there (the planner puts it at the start of the input's buffer) is either on that part or beside it,
    never half over it."""

    op_type = "Split"
    name = "view"
    view = {k: 0 for k in range(MAX_OUTPUTS)}

    def score(self, node, ins, outs) -> int:
        x = ins[0]
        if x is None or not x.static or not x.shape or not 0 < len(outs) <= MAX_OUTPUTS \
                or any(o is None or not o.static or o.shape is None for o in outs):
            return 0
        axis = node.attrs.get("axis", 0) % len(x.shape)
        parts = {tuple(o.shape) for o in outs}
        if len(parts) != 1 or any(d != 1 for d in x.shape[:axis]) \
                or next(iter(parts))[axis] * len(outs) != x.shape[axis]:
            return 0
        return 3

    def prepare(self, node, ins, outs) -> RunFn:
        axis = node.attrs.get("axis", 0) % len(ins[0].shape)
        width = outs[0].shape[axis]
        head = (slice(None),) * axis
        slices = tuple(head + (slice(k * width, (k + 1) * width),) for k in range(len(outs)))

        def run(inputs, outputs):
            x = inputs[0]
            return tuple(x[sl] for sl in slices)

        return run


IMPLEMENTATIONS = (SplitView,)
