"""Erf on the CPU.

reference: computed in float64 (see _unary.erf), stored in the input dtype.
fast (float32): Eigen's/XLA's rational approximation on x clamped to [-4, 4]
(erf(4) rounds to 1 in float32), evaluated in float32 in a few in-place passes;
error a few ulp.
"""
from __future__ import annotations

import numpy as np

from nnhal.graph.node import Node
from nnhal.hostkernels._unary import FormulaKernel, erf
from nnhal.hostkernels.base import Kernel, RunFn


class ErfKernel(FormulaKernel):
    op_type = "Erf"

    def formula(self, node: Node, x: np.ndarray) -> np.ndarray:
        return erf(x)


_ALPHA = np.array([-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
                   -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02], np.float32)
_BETA = np.array([-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
                  -1.42647390514189e-02], np.float32)


class ErfFast(Kernel):
    op_type = "Erf"
    name = "fast"
    inplace = {0: 0}

    def score(self, node, ins, outs) -> int:
        x = ins[0]
        return 10 if x is not None and x.dtype == np.float32 and x.shape is not None and len(x.shape) > 0 else 0

    def prepare(self, node, ins, outs) -> RunFn:
        def run(inputs, outputs):
            x = inputs[0]
            given = outputs[0]
            out = given if given is not None and given.flags.c_contiguous else np.empty(x.shape, np.float32)
            flat_x, flat_out = x.reshape(-1), out.reshape(-1)   # flat_out is a view: out is contiguous
            n = flat_x.size
            tmp, xc = _temps(min(n, CHUNK))
            for i in range(0, n, CHUNK):
                j = min(n, i + CHUNK)
                erf_chunk(flat_x[i:j], tmp[:j - i], xc[:j - i], flat_out[i:j])
            if given is not None and given is not out:
                np.copyto(given, out)
                out = given
            return (out,)

        return run


# elements per chunk: the dozen passes of the polynomial stay in cache
CHUNK = 1 << 15


def _temps(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.empty(n, np.float32), np.empty(n, np.float32)


def erf_chunk(x: np.ndarray, tmp: np.ndarray, xc: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """erf of the 1-d float32 ``x`` into ``out`` (may alias x); tmp and xc are scratch of x's size."""
    if out is None:
        out = np.empty_like(x)
    np.clip(x, -4.0, 4.0, out=xc)          # xc first: out may alias x
    x2 = np.multiply(xc, xc, out=tmp)
    p = np.multiply(x2, _ALPHA[0], out=out)
    p += _ALPHA[1]
    for a in _ALPHA[2:]:
        p *= x2
        p += a
    p *= xc
    q = np.multiply(x2, _BETA[0], out=xc)
    q += _BETA[1]
    for b in _BETA[2:]:
        q *= x2
        q += b
    np.divide(p, q, out=out)
    return out


IMPLEMENTATIONS = (ErfKernel, ErfFast)
