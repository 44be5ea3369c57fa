"""MelWeightMatrix on the CPU: the triangles evaluated over a (bins, mels) grid."""
from __future__ import annotations

import numpy as np

from nnhal.hostkernels.base import Kernel, RunFn, store


def mel_edges(num_mel_bins: int, dft_length: int, sample_rate, lower, upper) -> np.ndarray:
    """Spectrogram-bin index of each triangle edge: num_mel_bins + 2 integers."""
    # NOTE: the mel bounds are computed in the inputs' own precision (float32 for float32
    # inputs) because the bin indices are floored; this keeps the ONNX reference's edges.
    low = 2595 * np.log1p(lower / 700) / np.log(10)
    high = 2595 * np.log1p(upper / 700) / np.log(10)
    steps = np.arange(num_mel_bins + 2)
    mel = steps * ((high - low) / steps.shape[0]) + low
    hertz = 700 * np.expm1(mel / 2595 * np.log(10))
    return (((dft_length + 1) * hertz) // sample_rate).astype(np.int64)


def mel_weights(num_mel_bins: int, dft_length: int, edges: np.ndarray) -> np.ndarray:
    """Triangles rising from edge i to i+1 (peak 1) and falling to i+2, one per column."""
    j = np.arange(dft_length // 2 + 1)[:, None].astype(np.float64)
    left, center, right = (edges[k:k + num_mel_bins][None, :].astype(np.float64) for k in range(3))
    rise = (j - left) / np.maximum(center - left, 1)
    fall = (right - j) / np.maximum(right - center, 1)
    out = np.where((j >= left) & (j < center), rise, 0.0)
    out = np.where((j > center) & (j < right), fall, out)
    return np.where(j == center, 1.0, out)


class MelWeightMatrixKernel(Kernel):
    op_type = "MelWeightMatrix"

    def prepare(self, node, ins, outs) -> RunFn:
        dtype = outs[0].dtype

        def run(inputs, outputs):
            num_mel_bins, dft_length, sample_rate, lower, upper = (np.asarray(a).ravel()[0] for a in inputs)
            num_mel_bins, dft_length = int(num_mel_bins), int(dft_length)
            edges = mel_edges(num_mel_bins, dft_length, sample_rate, lower, upper)
            return (store(mel_weights(num_mel_bins, dft_length, edges), outputs[0], dtype),)

        return run


IMPLEMENTATIONS = (MelWeightMatrixKernel,)
