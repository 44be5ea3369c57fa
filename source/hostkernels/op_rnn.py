"""RNN on the CPU: input projection for all steps at once, then one GEMM per time step."""
from __future__ import annotations

from nnhal.hostkernels._qrc import Recurrence, activations
from nnhal.hostkernels.base import FunctionKernel


class RNNKernel(FunctionKernel):
    op_type = "RNN"

    def compute(self, node, *inputs):
        x, w, r = inputs[0], inputs[1], inputs[2]
        bias = inputs[3] if len(inputs) > 3 else None
        hidden = r.shape[-1]
        rec = Recurrence(node, list(inputs), (5,), hidden)
        acts = activations(node, ("Tanh",), rec.directions)
        ys, finals = [], []
        for d in range(rec.directions):
            b = None if bias is None else bias[d, :hidden] + bias[d, hidden:]
            xw = rec.project(w[d], b)
            rt = r[d].astype(rec.dtype, copy=False).T
            f = acts[d][0]

            def step(t, states, xw=xw, rt=rt, f=f):
                return [f(xw[t] + states[0] @ rt)]

            y, states = rec.run(rec.reverse(node, d), [rec.states[0][d]], step)
            ys.append(y)
            finals.append(states)
        return rec.pack(ys, finals, x.dtype)


IMPLEMENTATIONS = (RNNKernel,)
