"""DFT on the CPU: numpy FFTs in double precision."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels._reduce import from_complex, to_complex
from nnhal.hostkernels.base import Kernel, RunFn, store
from nnhal.operator._reduce import dft_axis
from nnhal.operator.table import get_prototype


class DFTKernel(Kernel):
    op_type = "DFT"

    def prepare(self, node, ins, outs) -> RunFn:
        proto = get_prototype(node.domain, node.op_type)
        inverse, onesided = bool(node.attrs["inverse"]), bool(node.attrs["onesided"])
        dtype = outs[0].dtype

        def run(inputs, outputs):
            x = inputs[0]
            rank = x.ndim
            if node.version < 20:
                axis = dft_axis(node, node.attrs["axis"], rank)
            else:
                given = inputs[2] if len(inputs) > 2 else None
                axis = dft_axis(node, -2 if given is None else int(np.asarray(given).ravel()[0]), rank)
            length_input = inputs[1] if len(inputs) > 1 else None
            if length_input is None:
                length = proto.length_of(node, [None], x.shape[axis])
            else:
                length = int(np.asarray(length_input).ravel()[0])
            z = to_complex(x)
            if inverse and onesided:
                y = np.fft.irfft(z, n=length, axis=axis)[..., None]
            elif inverse:
                y = from_complex(np.fft.ifft(z, n=length, axis=axis))
            else:
                spectrum = np.fft.fft(z, n=length, axis=axis)
                if onesided:
                    spectrum = np.take(spectrum, np.arange(length // 2 + 1), axis=axis)
                y = from_complex(spectrum)
            return (store(y, outputs[0], dtype),)

        return run


IMPLEMENTATIONS = (DFTKernel,)
