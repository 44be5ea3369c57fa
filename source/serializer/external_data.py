"""External-data tensors of an untrusted model, read safely.

A TensorProto with ``data_location = EXTERNAL`` names a file (``location``),
an ``offset`` and a ``length``. The model is untrusted input, so:

- the file must resolve inside the model's own folder (``base_dir``): no
  absolute location, no ``..`` component, no symlink whose target leaves the
  folder (the real path is checked with a common-path test);
- ``offset`` and ``length`` are checked against the file's size and against
  the tensor's declared size (dims x itemsize) before anything is read;
  without ``length`` the data runs from ``offset`` to the end of the file
  (the ONNX rule), so that span must equal the declared size: a 1 GiB file
  behind a 4-byte tensor is a malformed model, refused unread;
- only that range is read, ``length`` bytes from ``offset``.

onnx's own loader (``onnx.load(..., load_external_data=True)``,
``numpy_helper.to_array`` on an external tensor) is never called: it reads
from the current directory for models given as bytes.
"""
from __future__ import annotations

import os
from pathlib import PurePosixPath, PureWindowsPath

import numpy as np
import onnx

from nnhal.errors import ModelError
from nnhal.graph.dtypes import to_numpy, type_name

KEYS = frozenset({"location", "offset", "length", "checksum", "basepath"})
CHUNK = 1 << 26   # read in 64 MiB pieces


def is_external(tp: onnx.TensorProto) -> bool:
    """Whether a tensor keeps its bytes in an external file."""
    return tp.data_location == onnx.TensorProto.EXTERNAL


def read_external(tp: onnx.TensorProto, base_dir: str | None) -> np.ndarray:
    """The value of an external-data tensor, read from a file inside ``base_dir``."""
    name = tp.name or "<unnamed>"
    if base_dir is None:
        raise ModelError(f"tensor '{name}' keeps its data in an external file, but the model was given as "
                         f"bytes or a ModelProto: pass base_dir= (the folder holding its data files) to "
                         f"create_graph or Session")
    entries = {e.key: e.value for e in tp.external_data}
    unknown = sorted(set(entries) - KEYS)
    if unknown:
        raise ModelError(f"tensor '{name}': unknown external-data key(s) {unknown}; allowed: {sorted(KEYS)}")
    dtype = to_numpy(tp.data_type)
    if dtype is None or dtype == np.dtype(object):
        raise ModelError(f"tensor '{name}' has element type {type_name(tp.data_type)}, which cannot be stored "
                         f"as external data in nnhal")
    dims = list(tp.dims)
    if any(d < 0 for d in dims):
        raise ModelError(f"tensor '{name}' declares negative dims {dims}")
    count = int(np.prod(dims, dtype=object)) if dims else 1
    expected = count * dtype.itemsize
    offset = _int_entry(name, entries, "offset", 0)
    length = _int_entry(name, entries, "length", None)
    declared = f"its declared size {expected} bytes ({dims} x {dtype.itemsize})"
    if length is not None and length != expected:
        raise ModelError(f"tensor '{name}': external data length {length} differs from {declared}")
    path = resolve_location(name, entries.get("location", ""), base_dir)
    data = _read_range(name, path, offset, length, expected, declared)
    value = np.frombuffer(data, dtype=dtype.newbyteorder("<"), count=count)
    return value.astype(dtype, copy=False).reshape(dims)


def resolve_location(name: str, location: str, base_dir: str) -> str:
    """The real path of ``location`` under ``base_dir``; ModelError if it leaves the folder."""
    if not location:
        raise ModelError(f"tensor '{name}' has external data without a location")
    if "\0" in location:
        raise ModelError(f"tensor '{name}': external data location contains a NUL byte")
    posix, windows = PurePosixPath(location), PureWindowsPath(location)
    if posix.is_absolute() or windows.is_absolute() or windows.drive or location.startswith(("/", "\\")):
        raise ModelError(f"tensor '{name}': external data location '{location}' is absolute; "
                         f"it must be relative to the model's folder")
    if ".." in posix.parts or ".." in windows.parts:
        raise ModelError(f"tensor '{name}': external data location '{location}' contains '..'; "
                         f"it must stay inside the model's folder")
    root = os.path.realpath(base_dir)
    if not os.path.isdir(root):
        raise ModelError(f"tensor '{name}': base_dir '{base_dir}' is not a folder")
    # NOTE: realpath follows every symlink; the common-path test then catches a link leaving the folder.
    path = os.path.realpath(os.path.join(root, location))
    if os.path.commonpath([root, path]) != root:
        raise ModelError(f"tensor '{name}': external data location '{location}' resolves to a file outside "
                         f"the model's folder '{root}'")
    if not os.path.isfile(path):
        raise ModelError(f"tensor '{name}': external data file '{location}' does not exist in '{root}'")
    return path


def _int_entry(name: str, entries: dict[str, str], key: str, default: int | None) -> int | None:
    if key not in entries:
        return default
    try:
        value = int(entries[key])
    except ValueError:
        raise ModelError(f"tensor '{name}': external data {key} '{entries[key]}' is not an integer") from None
    if value < 0:
        raise ModelError(f"tensor '{name}': external data {key} {value} is negative")
    return value


def _read_range(name: str, path: str, offset: int, length: int | None, expected: int, declared: str) -> bytearray:
    """Exactly ``expected`` bytes from ``offset`` of ``path``, checked against its size first.

    ``length`` None (no ``length`` entry) means to the end of the file, which must then hold exactly
    ``expected`` bytes from ``offset`` (``declared`` describes that size for the message)."""
    # NOTE: seek + read of exactly the range rather than mmap: a file truncated while it is read gives a
    # short read (an error here), where a mapping would give SIGBUS.
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ModelError(f"tensor '{name}': cannot open its external data file: {exc}") from exc
    with os.fdopen(fd, "rb", buffering=0) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            if length is None and offset <= size and size - offset != expected:
                raise ModelError(f"tensor '{name}': external data has no length, so it runs from offset {offset} "
                                 f"to the end of its {size}-byte file: {size - offset} bytes, which differs from "
                                 f"{declared}")
            length = expected
            if offset + length > size:
                raise ModelError(f"tensor '{name}': external data range [{offset}, {offset + length}) lies "
                                 f"beyond the end of its {size}-byte file")
            buf = bytearray(length)
            view = memoryview(buf)
            f.seek(offset)
            done = 0
            while done < length:
                got = f.readinto(view[done:done + CHUNK])
                if not got:
                    raise ModelError(f"tensor '{name}': its external data file ended after {done} of "
                                     f"{length} bytes")
                done += got
            return buf
        except OSError as exc:
            raise ModelError(f"tensor '{name}': reading its external data failed: {exc}") from exc
