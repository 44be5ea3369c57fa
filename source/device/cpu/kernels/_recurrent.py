"""The fast LSTM and GRU kernels' shared part: weights packed once, the input projection of every step
and direction as one GEMM, then a tight recurrence (one small GEMM per step and direction, the gates
computed in place in per-run buffers, no temporaries of the step's size).

They take the common case: constant weights and biases, the default activations, no clip, no peepholes,
no coupled input-forget gate, sequence lengths absent or constant and covering every step, float32
compute (float16 tensors are widened on the way in and narrowed on the way out). Every other node keeps
the reference kernels of op_lstm.py / op_gru.py (scored below these).

NOTE: a step costs a dozen numpy calls on arrays of a few hundred elements, so the number of calls is the
cost. The sigmoid gates use sigmoid(x) = (tanh(x / 2) + 1) / 2 with the halving folded into their rows of
W, R and the bias at prepare (exact: a power of two), so one tanh call covers every gate of a step.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnhal.device.cpu import parallel
from nnhal.graph.node import Node
from nnhal.operator.base import Info


@dataclass(frozen=True)
class Packed:
    """The constant operands of a recurrent node, in the forms the recurrence reads."""

    directions: int
    hidden: int
    wt: np.ndarray          # (input, D * gates * H): W^T of every direction side by side
    bias: np.ndarray        # (D * gates * H,): what is added to the projection
    rt: list[np.ndarray]    # per direction R^T (H, gates * H), C-contiguous
    rbias: list[np.ndarray]  # per direction the recurrent bias the projection cannot take (GRU's Rb_h)


def fits(node: Node, ins: list[Info | None], defaults: tuple[str, ...], state_inputs: tuple[int, ...]) -> bool:
    """True when the fast recurrence computes ``node`` exactly as the reference does (see the module)."""
    if ins[0] is None or ins[0].dtype not in (np.float32, np.float16):
        return False
    if any(ins[i] is None or ins[i].value is None for i in (1, 2)):
        return False
    if len(ins) > 3 and ins[3] is not None and ins[3].value is None:
        return False
    if len(ins) > 4 and ins[4] is not None:
        lens = ins[4].value
        if lens is None or ins[0].shape is None or not isinstance(ins[0].shape[1 - node.attrs.get("layout", 0)],
                                                                   int):
            return False
        if np.any(np.asarray(lens) < ins[0].shape[1 - node.attrs.get("layout", 0)]):
            return False
    if any(len(ins) > i and ins[i] is not None for i in range(max(state_inputs) + 1, len(ins))):
        return False       # peepholes
    names = [a.lower() for a in (node.attrs.get("activations") or [])]
    if names and names != [a.lower() for a in defaults] * (len(names) // len(defaults)):
        return False
    if node.attrs.get("clip") is not None or node.attrs.get("input_forget", 0):
        return False
    return not node.attrs.get("activation_alpha") and not node.attrs.get("activation_beta")


def pack(ins: list[Info | None], gates: int, folded: int, sigmoids: int) -> Packed:
    """W, R, B packed: B's first ``gates * H`` (input bias) plus the first ``folded * H`` of its recurrent
    half go into the projection's bias; the rest of the recurrent bias stays per step (``rbias``). The rows
    of the first ``sigmoids`` gates are halved (see the NOTE above)."""
    w = np.array(ins[1].value, np.float32)
    r = np.array(ins[2].value, np.float32)
    d, rows, _ = w.shape
    h = rows // gates
    b = np.zeros((d, 2 * gates * h), np.float32)
    if len(ins) > 3 and ins[3] is not None:
        b = np.array(ins[3].value, np.float32)
    bias = b[:, :gates * h].copy()
    bias[:, :folded * h] += b[:, gates * h:gates * h + folded * h]
    for a in (w, r):
        a[:, :sigmoids * h] *= 0.5
    bias[:, :sigmoids * h] *= 0.5
    return Packed(d, h, np.ascontiguousarray(np.concatenate(list(w), 0).T), bias.reshape(-1),
                  [np.ascontiguousarray(r[k].T) for k in range(d)],
                  [b[k, gates * h + folded * h:].copy() for k in range(d)])


def initial(inputs: list, index: int, shape: tuple[int, int, int], layout: int) -> np.ndarray:
    """An initial state (D, B, H) as a float32 copy the recurrence may overwrite (zeros when absent)."""
    s = inputs[index] if len(inputs) > index else None
    if s is None:
        return np.zeros(shape, np.float32)
    if layout == 1:
        s = s.transpose(1, 0, 2)
    return np.array(s, np.float32)


def project(x: np.ndarray, p: Packed, layout: int) -> tuple[np.ndarray, int, int]:
    """(X W^T + bias) of every step and direction in one GEMM: (T, B, D, gates * H); and T, B."""
    x = x.astype(np.float32, copy=False)
    if layout == 1:
        x = x.transpose(1, 0, 2)
    t, b, i = x.shape
    xw = parallel.matmul(np.ascontiguousarray(x).reshape(t * b, i), p.wt)
    xw += p.bias
    return xw.reshape(t, b, p.directions, -1), t, b


def finish(y: np.ndarray, states: list[np.ndarray], outputs: list, dtype: np.dtype, layout: int) -> tuple:
    """Y (T, D, B, H) and the final states (D, B, H) in the node's layout, stored into the preallocated
    outputs (or returned, converted to ``dtype``)."""
    if layout == 1:
        y = y.transpose(2, 0, 1, 3)
        states = [s.transpose(1, 0, 2) for s in states]
    results = []
    for r, out in zip([y, *states], outputs):
        if out is None:
            results.append(r.astype(dtype, copy=False))
        else:
            np.copyto(out, r, casting="unsafe")
            results.append(out)
    return tuple(results)


def lstm(x: np.ndarray, p: Packed, h: np.ndarray, c: np.ndarray, reverse: tuple[bool, ...], layout: int) \
        -> tuple[np.ndarray, list[np.ndarray]]:
    """The LSTM recurrence (gates i, o, f, c): Y (T, D, B, H), final h and c; ``h``, ``c`` (D, B, H) are
    overwritten."""
    xw, steps, batch = project(x, p, layout)
    n = p.hidden
    y = np.empty((steps, p.directions, batch, n), np.float32)
    g = np.empty((batch, 4 * n), np.float32)
    tmp = np.empty((batch, n), np.float32)
    i, o, f, cand = g[:, :n], g[:, n:2 * n], g[:, 2 * n:3 * n], g[:, 3 * n:]
    sig = g[:, :3 * n]
    for d in range(p.directions):
        hd, cd, rt = h[d], c[d], p.rt[d]
        for t in (range(steps - 1, -1, -1) if reverse[d] else range(steps)):
            np.matmul(hd, rt, out=g)
            g += xw[t, :, d]
            np.tanh(g, out=g)
            sig *= 0.5
            sig += 0.5
            cd *= f
            np.multiply(i, cand, out=tmp)
            cd += tmp
            np.tanh(cd, out=tmp)
            hd = y[t, d]
            np.multiply(o, tmp, out=hd)
        h[d] = hd
    return y, [h, c]


def gru(x: np.ndarray, p: Packed, h: np.ndarray, reverse: tuple[bool, ...], linear: bool, layout: int) \
        -> tuple[np.ndarray, list[np.ndarray]]:
    """The GRU recurrence (gates z, r, h; ``linear``: linear_before_reset): Y (T, D, B, H), final h;
    ``h`` (D, B, H) is overwritten."""
    xw, steps, batch = project(x, p, layout)
    n = p.hidden
    y = np.empty((steps, p.directions, batch, n), np.float32)
    g = np.empty((batch, 3 * n), np.float32)
    rh = np.empty((batch, n), np.float32)
    zr, z, r, hh = g[:, :2 * n], g[:, :n], g[:, n:2 * n], g[:, 2 * n:]
    for d in range(p.directions):
        prev, rt, rb = h[d], p.rt[d], p.rbias[d]
        rt_zr, rt_h = np.ascontiguousarray(rt[:, :2 * n]), np.ascontiguousarray(rt[:, 2 * n:])
        for t in (range(steps - 1, -1, -1) if reverse[d] else range(steps)):
            xt = xw[t, :, d]
            if linear:
                np.matmul(prev, rt, out=g)
                zr += xt[:, :2 * n]
                np.tanh(zr, out=zr)
                zr *= 0.5
                zr += 0.5
                hh += rb
                hh *= r
            else:
                np.matmul(prev, rt_zr, out=zr)
                zr += xt[:, :2 * n]
                np.tanh(zr, out=zr)
                zr *= 0.5
                zr += 0.5
                np.multiply(r, prev, out=rh)
                np.matmul(rh, rt_h, out=hh)
                hh += rb
            hh += xt[:, 2 * n:]
            np.tanh(hh, out=hh)
            out = y[t, d]
            np.subtract(prev, hh, out=out)      # h' = hh + z * (h - hh)
            out *= z
            out += hh
            prev = out
        h[d] = prev
    return y, [h]
