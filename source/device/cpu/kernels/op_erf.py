"""Erf on the CPU.

reference: computed in float64 (see _unary.erf), stored in the input dtype.
fast (float32): Eigen's/XLA's rational approximation on x clamped to [-4, 4]
(erf(4) rounds to 1 in float32), evaluated in float32 in a few in-place passes;
error a few ulp.
"""
from __future__ import annotations

import numpy as np

from nnhal.device.cpu.kernels._unary import FormulaKernel, erf
from nnhal.device.cpu.kernels.base import Kernel, RunFn
from nnhal.graph.node import Node


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
            out = outputs[0] if outputs[0] is not None else np.empty_like(x)
            tmp = np.empty_like(x)
            xc = np.clip(x, -4.0, 4.0)          # a copy: out may alias x
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
            return (out,)

        return run


IMPLEMENTATIONS = (ErfKernel, ErfFast)
