"""What a native kernel of one input and one output is handed: the input as a C-contiguous array (copied only
when it is not one) and the preallocated output when it is C-contiguous, else a fresh array."""
from __future__ import annotations

import numpy as np


def contiguous_io(inputs: list, outputs: list, shape: tuple, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) for a native call: input 0 made C-contiguous, output 0 or a new ``shape``/``dtype`` array."""
    x = inputs[0]
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    y = outputs[0]
    if y is None or not y.flags.c_contiguous:
        y = np.empty(shape, dtype)
    return x, y


def planned_io(inputs: list, outputs: list, in_shape: tuple, out_shape: tuple, dtype) -> bool:
    """Whether a bound step (straight.bind) may hand input 0 and output 0 to its native call as they are: a planned
    output, both C-contiguous of ``dtype`` and of their static shapes (no per-run copy would be needed: a bound call
    must read its operands where they lie, never a snapshot of them)."""
    x, y = inputs[0], outputs[0]
    return y is not None and x is not None and x.dtype == dtype and y.dtype == dtype and x.shape == in_shape \
        and y.shape == out_shape and x.flags.c_contiguous and y.flags.c_contiguous


def evenly_spaced_pixels(y: np.ndarray) -> bool:
    """Whether a 4-D channels-last array has unit-stride channels and evenly spaced pixels at least its channels
    apart: C-contiguous, or a channel slice of a wider channels-last tensor (plan.concat_slices), what the native
    kernels take as an output with a pixel stride (native/nn_buffer.h nn_get_pixels)."""
    _, h, w, c = y.shape
    s, item = y.strides, y.itemsize
    pixel = s[2]
    return s[3] == item and pixel % item == 0 and pixel >= c * item and s[1] == w * pixel and s[0] == h * w * pixel
