"""LSTM on the CPU: input projection for all steps at once, then one recurrent GEMM per step."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._qrc import Recurrence, activations
from nnhal.hostkernels.base import FunctionKernel


class LSTMKernel(FunctionKernel):
    op_type = "LSTM"

    def compute(self, node, *inputs):
        x, w, r = inputs[0], inputs[1], inputs[2]
        bias = inputs[3] if len(inputs) > 3 else None
        peep = inputs[7] if len(inputs) > 7 else None
        h = r.shape[-1]
        rec = Recurrence(node, list(inputs), (5, 6), h)
        # NOTE: clip bounds the gate pre-activations, not the cell state fed to h
        # (as onnxruntime does; the ONNX reference ignores clip).
        acts = activations(node, ("Sigmoid", "Tanh", "Tanh"), rec.directions, unclipped=(2,))
        coupled = bool(node.attrs.get("input_forget", 0))
        ys, finals = [], []
        for d in range(rec.directions):
            b = None if bias is None else bias[d, :4 * h] + bias[d, 4 * h:]
            xw = rec.project(w[d], b)
            rt = r[d].astype(rec.dtype, copy=False).T
            p = np.zeros(3 * h, rec.dtype) if peep is None else peep[d].astype(rec.dtype)
            f, g, act_h = acts[d]

            def step(t, states, xw=xw, rt=rt, p=p, f=f, g=g, act_h=act_h):
                prev_h, prev_c = states
                gates = xw[t] + prev_h @ rt
                i = f(gates[:, :h] + p[:h] * prev_c)
                forget = 1 - i if coupled else f(gates[:, 2 * h:3 * h] + p[2 * h:] * prev_c)
                c = forget * prev_c + i * g(gates[:, 3 * h:])
                o = f(gates[:, h:2 * h] + p[h:2 * h] * c)
                return [o * act_h(c), c]

            y, states = rec.run(rec.reverse(node, d), [rec.states[0][d], rec.states[1][d]], step)
            ys.append(y)
            finals.append(states)
        return rec.pack(ys, finals, x.dtype)


IMPLEMENTATIONS = (LSTMKernel,)
