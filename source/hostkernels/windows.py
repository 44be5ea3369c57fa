"""Sliding windows of an N-d image: im2col as a strided view, the shared host helper every convolution-like
kernel builds on (the Conv and QLinearConv reference kernels, the vnpu template's integer convolution)."""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def im2col(x: np.ndarray, kernel: list[int], strides: list[int], dilations: list[int],
           pads: list[int]) -> tuple[np.ndarray, list[int]]:
    """Windows of x (N, C, *S) as a view (N, C, *out, *kernel) after padding; the output's spatial sizes."""
    n = len(kernel)
    if any(pads):
        width = [(0, 0), (0, 0)] + [(pads[i], pads[i + n]) for i in range(n)]
        x = np.pad(x, width)
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    win = sliding_window_view(x, spans, axis=tuple(range(2, 2 + n)))
    index = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides) \
        + tuple(slice(None, None, d) for d in dilations)
    win = win[index]
    return win, list(win.shape[2:2 + n])
