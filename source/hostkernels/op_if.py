"""If on the CPU: run the chosen branch's compiled plan (cached per outer shapes)."""
from __future__ import annotations

from typing import ClassVar

from nnhal.hostkernels._qrc import BodyRunner, check_bool, outer_values, own
from nnhal.hostkernels.base import Kernel, RunFn, checking, store
from nnhal.hostkernels.graphrun import Compiler


class IfKernel(Kernel):
    op_type = "If"
    # the compiler of its bodies; None = the host one (graphrun.compile_nodes); a device sets its own
    compiler: ClassVar[Compiler | None] = None

    def prepare(self, node, ins, outs) -> RunFn:
        branches = {True: BodyRunner(node.attrs["then_branch"], node.implicit_inputs, self.compiler),
                    False: BodyRunner(node.attrs["else_branch"], node.implicit_inputs, self.compiler)}
        dtypes = [o.dtype for o in outs]
        check = checking()    # NOTE: NNHAL_CHECK read once at prepare, not per node run

        def run(inputs, outputs):
            taken = branches[check_bool(node, inputs[0], "cond")]
            outer = outer_values(node, inputs)
            held = taken.iterations(turns=1)
            try:
                # the branch's outputs may be its plan's buffers (held until close): stored or copied here
                results = held.call([outer[n] for n in taken.implicit], check)
                return tuple(store(r if o is not None else own(r), o, d)
                             for r, o, d in zip(results, outputs, dtypes))
            finally:
                held.close()

        return run


IMPLEMENTATIONS = (IfKernel,)
