"""STFT on the CPU: strided frames, one batched FFT."""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from nnhal.errors import ShapeError, where
from nnhal.hostkernels._reduce import from_complex, to_complex
from nnhal.hostkernels.base import Kernel, RunFn, store


class STFTKernel(Kernel):
    op_type = "STFT"

    def prepare(self, node, ins, outs) -> RunFn:
        onesided = bool(node.attrs["onesided"])
        dtype = outs[0].dtype

        def run(inputs, outputs):
            signal, step = inputs[0], int(np.asarray(inputs[1]).ravel()[0])
            window = inputs[2] if len(inputs) > 2 else None
            given = inputs[3] if len(inputs) > 3 else None
            frame = _frame_length(node, signal, window, given)
            z = to_complex(signal)                                    # (batch, length)
            frames = sliding_window_view(z, frame, axis=1)[:, ::step]  # (batch, frames, frame)
            if window is not None:
                frames = frames * window.astype(np.float64)
            spectrum = np.fft.fft(frames, axis=-1)
            if onesided:
                spectrum = spectrum[..., :frame // 2 + 1]
            return (store(from_complex(spectrum), outputs[0], dtype),)

        return run


def _frame_length(node, signal: np.ndarray, window: np.ndarray | None, given: np.ndarray | None) -> int:
    if given is not None:
        frame = int(np.asarray(given).ravel()[0])
        if window is not None and window.shape[0] != frame:
            raise ShapeError(f"{where(node)}: frame_length {frame} differs from the window length {window.shape[0]}")
    else:
        frame = window.shape[0] if window is not None else signal.shape[1]
    if not 1 <= frame <= signal.shape[1]:
        raise ShapeError(f"{where(node)}: frame_length {frame} does not fit a signal of length {signal.shape[1]}")
    return frame


IMPLEMENTATIONS = (STFTKernel,)
