"""GRU on the CPU: input projection for all steps at once, then per-step recurrent GEMMs."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._qrc import Recurrence, activations
from nnhal.hostkernels.base import FunctionKernel


class GRUKernel(FunctionKernel):
    op_type = "GRU"

    def compute(self, node, *inputs):
        x, w, r = inputs[0], inputs[1], inputs[2]
        bias = inputs[3] if len(inputs) > 3 else None
        h = r.shape[-1]
        rec = Recurrence(node, list(inputs), (5,), h)
        acts = activations(node, ("Sigmoid", "Tanh"), rec.directions)
        linear = bool(node.attrs.get("linear_before_reset", 0))
        ys, finals = [], []
        for d in range(rec.directions):
            wb = None if bias is None else bias[d, :3 * h]
            rb = np.zeros(3 * h, rec.dtype) if bias is None else bias[d, 3 * h:].astype(rec.dtype)
            xw = rec.project(w[d], wb)
            rd = r[d].astype(rec.dtype, copy=False)
            r_zr, r_h = rd[:2 * h].T, rd[2 * h:].T
            f, g = acts[d][0], acts[d][1]

            def step(t, states, xw=xw, r_zr=r_zr, r_h=r_h, rb=rb, f=f, g=g):
                prev = states[0]
                zr = f(xw[t, :, :2 * h] + prev @ r_zr + rb[:2 * h])
                z, reset = zr[:, :h], zr[:, h:]
                if linear:
                    cand = g(xw[t, :, 2 * h:] + reset * (prev @ r_h + rb[2 * h:]))
                else:
                    cand = g(xw[t, :, 2 * h:] + (reset * prev) @ r_h + rb[2 * h:])
                return [(1 - z) * cand + z * prev]

            y, states = rec.run(rec.reverse(node, d), [rec.states[0][d]], step)
            ys.append(y)
            finals.append(states)
        return rec.pack(ys, finals, x.dtype)


IMPLEMENTATIONS = (GRUKernel,)
