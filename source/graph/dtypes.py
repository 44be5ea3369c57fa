"""ONNX element types <-> numpy dtypes, for the dtypes nnhal runs."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

ONNX_TO_NUMPY: dict[int, np.dtype] = {
    TensorProto.FLOAT: np.dtype(np.float32),
    TensorProto.DOUBLE: np.dtype(np.float64),
    TensorProto.FLOAT16: np.dtype(np.float16),
    TensorProto.INT8: np.dtype(np.int8),
    TensorProto.INT16: np.dtype(np.int16),
    TensorProto.INT32: np.dtype(np.int32),
    TensorProto.INT64: np.dtype(np.int64),
    TensorProto.UINT8: np.dtype(np.uint8),
    TensorProto.UINT16: np.dtype(np.uint16),
    TensorProto.UINT32: np.dtype(np.uint32),
    TensorProto.UINT64: np.dtype(np.uint64),
    TensorProto.BOOL: np.dtype(np.bool_),
    TensorProto.STRING: np.dtype(object),
}
NUMPY_TO_ONNX: dict[np.dtype, int] = {v: k for k, v in ONNX_TO_NUMPY.items()}


def to_numpy(elem_type: int) -> np.dtype | None:
    """The numpy dtype of an ONNX element type, or None when nnhal has none."""
    return ONNX_TO_NUMPY.get(elem_type)


def type_name(elem_type: int) -> str:
    """The ONNX name of an element type; an unknown code (999) is named by its number."""
    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:
        return f"unknown element type {elem_type}"


def to_onnx(dtype: np.dtype) -> int:
    return NUMPY_TO_ONNX[np.dtype(dtype)]
