"""What the core checks and owns of a device's outputs, between its run and the next subgraph.

The rule (docs/device-guide.md, "Who owns the outputs"): a device's ``run`` puts into
``subgraph.values`` arrays that no later run of the device writes again, i.e. fresh arrays per
run, unless its Description says ``reuses_outputs=True``; then the core copies each output as it
leaves the subgraph. Either way, an array a user receives from ``Session.run`` is never changed
by a later run. Every output is checked against what inference said of it (dtype, and every dim
inference knows); a wrong one is a DeviceError naming the device, the subgraph, the tensor, what
was expected and what came, and the scheduler treats it as any failed run (fallback, or the error
under strict). A scheduler of a device's own calls :func:`check_outputs` and :func:`take_output`
as the default one does.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from nnhal.errors import DeviceError
from nnhal.graph.subgraph import Subgraph
from nnhal.optimizer.boundary import to_host


def expected(view: Subgraph, name: str) -> tuple[np.dtype | None, tuple | None]:
    """The dtype and shape inference gave output ``name`` of ``view`` in the device's format (the
    format the device declared for it, else the tensor's dtype in the subgraph's graph)."""
    tensor = view.graph.tensors.get(name)
    fmt = view.output_formats.get(name)
    dtype = fmt.dtype if fmt is not None else (tensor.dtype if tensor is not None else None)
    return (np.dtype(dtype) if dtype is not None else None), (tensor.shape if tensor is not None else None)


def _describe(dtype: Any, shape: tuple | None) -> str:
    dims = "?" if shape is None else "[" + ", ".join("?" if not isinstance(d, int) else str(d) for d in shape) + "]"
    return f"{dtype if dtype is not None else '?'} {dims}"


def check_outputs(view: Subgraph) -> None:
    """DeviceError unless ``view``'s run wrote every output, each an array of the dtype and shape inference
    gave it (a dim inference left unknown matches any size)."""
    missing = [name for name in view.outputs if name not in view.values]
    if missing:
        raise DeviceError(f"subgraph #{view.index} on device '{view.device}': its run wrote no value for "
                          f"output(s) {missing}; run must write every output into subgraph.values")
    tensors, formats, values = view.graph.tensors, view.output_formats, view.values
    for name in view.outputs:
        value = values[name]
        tensor = tensors.get(name)
        # NOTE: the run path: an array of the tensor's own dtype and fully known shape, no device format
        if tensor is not None and type(value) is np.ndarray and value.shape == tensor.shape \
                and tensor.dtype is not None and value.dtype == tensor.dtype and name not in formats:
            continue
        dtype, shape = expected(view, name)
        if not isinstance(value, (np.ndarray, np.generic)):     # a numpy scalar is taken as a 0-d array
            if isinstance(value, (list, tuple)) and (dtype is None or shape is None):
                continue            # a sequence value (SequenceConstruct and friends) has no tensor Info
            raise DeviceError(f"subgraph #{view.index} on device '{view.device}': output '{name}' is a "
                              f"{type(value).__name__}, expected a numpy array of {_describe(dtype, shape)}")
        wrong_dtype = dtype is not None and value.dtype != dtype
        wrong_shape = shape is not None and (len(shape) != value.ndim or any(
            isinstance(d, int) and d != s for d, s in zip(shape, value.shape)))
        if wrong_dtype or wrong_shape:
            raise DeviceError(f"subgraph #{view.index} on device '{view.device}': output '{name}' is "
                              f"{value.dtype} {list(value.shape)}, inference expected {_describe(dtype, shape)}")


def take_output(view: Subgraph, name: str, host_dtype: np.dtype | None, copy: bool) -> np.ndarray:
    """Output ``name`` of ``view`` in the host format (converted from the format the device declared), a copy
    when ``copy`` (the device reuses its output buffers) and the conversion did not already make one."""
    value = view.values[name]
    if isinstance(value, np.generic):
        value = np.asarray(value)
    fmt = view.output_formats.get(name)
    host = to_host(value, fmt, host_dtype) if fmt is not None and host_dtype is not None else value
    if copy and host is view.values[name] and isinstance(value, np.ndarray):
        host = value.copy()
    return host
