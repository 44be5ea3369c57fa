"""If on the CPU: run the chosen branch's compiled plan (cached per outer shapes)."""
from __future__ import annotations

from nnhal.hostkernels._qrc import BodyRunner, check_bool, outer_values, own
from nnhal.hostkernels.base import Kernel, RunFn, checking, store


class IfKernel(Kernel):
    op_type = "If"

    def prepare(self, node, ins, outs) -> RunFn:
        branches = {True: BodyRunner(node.attrs["then_branch"], node.implicit_inputs),
                    False: BodyRunner(node.attrs["else_branch"], node.implicit_inputs)}
        dtypes = [o.dtype for o in outs]

        def run(inputs, outputs):
            taken = branches[check_bool(node, inputs[0], "cond")]
            results = taken.run([], outer_values(node, inputs), checking())
            return tuple(store(r if o is not None else own(r), o, d)
                         for r, o, d in zip(results, outputs, dtypes))

        return run


IMPLEMENTATIONS = (IfKernel,)
