"""Read a .safetensors file with numpy alone (no torch, no safetensors package).

The format: an 8-byte little-endian header length N, N bytes of JSON
(tensor name -> {"dtype", "shape", "data_offsets": [begin, end]}, plus an
optional "__metadata__"), then the raw little-endian tensor bytes, offsets
counted from the end of the header.
"""
from __future__ import annotations

import json
import os
import struct

import numpy as np

from nnhal.errors import ModelError

DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
          "U8": "u1", "BOOL": "?"}
MAX_HEADER = 100 << 20


def read_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every tensor of the file as a numpy array (native byte order); ModelError on a malformed file."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ModelError(f"'{path}' is too short to be a safetensors file")
    (size,) = struct.unpack("<Q", blob[:8])
    if size > min(MAX_HEADER, len(blob) - 8):
        raise ModelError(f"'{path}': header length {size} exceeds the file")
    try:
        header = json.loads(blob[8:8 + size])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"'{path}': the header is not JSON: {exc}") from exc
    data = memoryview(blob)[8 + size:]
    tensors: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = DTYPES.get(info.get("dtype"))
        if dtype is None:
            raise ModelError(f"'{path}': tensor '{name}' has dtype {info.get('dtype')!r}; readable: {sorted(DTYPES)}")
        begin, end = info["data_offsets"]
        shape = tuple(int(d) for d in info["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        if not 0 <= begin <= end <= len(data) or end - begin != count * np.dtype(dtype).itemsize:
            raise ModelError(f"'{path}': tensor '{name}' offsets {begin}..{end} do not hold {shape} {dtype}")
        tensors[name] = np.frombuffer(data[begin:end], dtype).reshape(shape).astype(np.dtype(dtype).newbyteorder("="))
    return tensors
