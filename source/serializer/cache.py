"""The compiled-model cache: an imported graph saved once, loaded again without protobuf parsing.

``load_cached(source, directory)`` returns what ``load_onnx(source)`` returns. An entry is keyed by the
tree SHA-256 (_checksum) of the model's bytes, the cache format and the versions of nnhal, onnx, numpy and Python (what
the import depends on; options apply after import, at prerun, so they do not key it). A model given by
path is hashed once per (path, size, mtime, inode): a small index file remembers the digest of the file
as it was, as git's index does; a changed file is hashed again.

Trust model. An entry is a pickle (of nnhal's own Graph objects) plus the raw weight buffers, so it must
only ever be read from a directory the user alone controls: the directory must be owned by the current
user and not writable by group or others, else the cache is not used (a warning says why). Each entry
carries a SHA-256 tree checksum of everything after its header (_checksum) and the full key; an entry whose header, key,
versions or checksum do not match, or that fails to load, is ignored with a warning and rewritten; it is
never trusted blindly. The checksum guards against corruption and stale entries, not against an attacker
who can write to the directory: that is what the ownership check is for.

Weights are mapped from the entry file copy-on-write (mmap), so a cached load reads each page once and a
kernel that writes into a constant changes only its private copy.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import mmap
import os
import pickle
import stat
import struct
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from nnhal.graph.graph import Graph

FORMAT = 2
MAGIC = b"NNHALC2\n"
ALIGN = 64
PIECE = 1 << 24     # bytes per leaf of the checksum tree


class CacheWarning(UserWarning):
    """A compiled-cache entry or directory was not used; the model was imported from its source."""


@functools.lru_cache(maxsize=1)
def _versions() -> dict[str, str]:
    try:
        version = importlib.metadata.version("nnhal")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return {"format": str(FORMAT), "nnhal": version, "importer": _importer_digest(), "onnx": onnx.__version__,
            "numpy": np.__version__, "python": sys.version.split()[0]}


def _importer_digest() -> str:
    """SHA-256 of the code that builds what the cache stores (the importer and the IR): an edited
    importer invalidates entries even when the package version stays the same."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted([*root.joinpath("serializer").glob("*.py"), *root.joinpath("graph").glob("*.py")]):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def trusted_directory(directory: Path) -> str | None:
    """None when ``directory`` (created 0700 if missing) may hold cache entries, else why not."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = directory.stat()
    except OSError as exc:
        return f"cannot create or read it: {exc}"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return "it is not owned by the current user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "it is writable by group or others (chmod go-w it)"
    return None


def model_digest(source: Any, directory: Path) -> str:
    """The tree SHA-256 (_checksum) of the model's bytes; for a path, remembered per (path, size, mtime,
    inode)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _checksum(memoryview(source).cast("B"))
    if isinstance(source, onnx.ModelProto):
        return _checksum(memoryview(source.SerializeToString()))
    path = Path(source).resolve()
    st = path.stat()
    mark = [str(path), st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev]
    index = directory / f"path-{hashlib.sha256(str(path).encode()).hexdigest()[:32]}.json"
    try:
        known = json.loads(index.read_text())
        if known.get("mark") == mark and known.get("format") == FORMAT and isinstance(known.get("digest"), str):
            return known["digest"]
    except (OSError, ValueError):
        pass
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            digest = _checksum(memoryview(b""))
        else:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                view = memoryview(mapped)
                digest = _checksum(view)
                view.release()
    _write_atomic(index, json.dumps({"mark": mark, "format": FORMAT, "digest": digest}).encode())
    return digest


def load_cached(source: Any, directory: str | os.PathLike, load) -> Graph:
    """``load(source)`` (the importer), served from and saved to the cache in ``directory`` when trusted."""
    directory = Path(directory).expanduser()
    why = trusted_directory(directory)
    if why is not None:
        warnings.warn(f"nnhal: not using the compiled cache '{directory}': {why}", CacheWarning, stacklevel=3)
        return load(source)
    try:
        digest = model_digest(source, directory)
    except OSError:
        return load(source)     # an unreadable path: the importer reports it as a ModelError
    key = {**_versions(), "model_sha256": digest}
    entry = directory / f"{digest[:40]}-nnhal{key['nnhal']}-f{FORMAT}.nnhc"
    if entry.exists():
        try:
            return read_entry(entry, key)
        except Exception as exc:  # noqa: BLE001 - any defect of an entry means: import again
            warnings.warn(f"nnhal: ignoring compiled cache entry '{entry}': {exc}", CacheWarning, stacklevel=3)
    graph = load(source)
    if getattr(graph, "external_data", False):
        return graph            # its weights live in other files, which the key does not cover: never cached
    try:
        write_entry(entry, key, graph)
    except (OSError, pickle.PicklingError, TypeError, ValueError) as exc:
        warnings.warn(f"nnhal: could not write compiled cache entry '{entry}': {exc}", CacheWarning, stacklevel=3)
    return graph


# ------------------------------------------------------------------ entry format
# MAGIC, u64 header length, header JSON, padding to ALIGN, the pickle, then each out-of-band buffer at an
# ALIGN-ed offset. The header holds the key, the pickle's and buffers' (offset, length) and the tree
# checksum (_checksum) of every byte after the header.
def write_entry(entry: Path, key: dict, graph: Graph) -> None:
    buffers: list[pickle.PickleBuffer] = []
    body = pickle.dumps(graph, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    spans, offset = [], _align(len(body))
    for raw in raws:
        spans.append((offset, raw.nbytes))
        offset = _align(offset + raw.nbytes)
    total = offset
    parts: list[bytes | memoryview] = []
    cursor = 0
    for data, (start, _) in zip([memoryview(body)] + raws, [(0, len(body))] + spans):
        if start > cursor:
            parts.append(bytes(start - cursor))
        parts.append(data)
        cursor = start + data.nbytes
    if total > cursor:
        parts.append(bytes(total - cursor))
    header = json.dumps({"key": key, "pickle": len(body), "buffers": spans, "size": total,
                         "checksum": _checksum_of_parts(parts)}).encode()
    head = MAGIC + struct.pack("<Q", len(header)) + header
    head += bytes(_align(len(head)) - len(head))
    _write_atomic(entry, head, parts)


def read_entry(entry: Path, key: dict) -> Graph:
    with open(entry, "rb") as f:
        st = os.fstat(f.fileno())
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            raise ValueError("the entry is not owned by the current user")
        if f.read(len(MAGIC)) != MAGIC:
            raise ValueError("not an nnhal cache entry (bad magic)")
        (length,) = struct.unpack("<Q", f.read(8))
        if length > 1 << 24:
            raise ValueError("header too large")
        header = json.loads(f.read(length))
        if header.get("key") != key:
            raise ValueError("stale: it was written for another model or nnhal/onnx/numpy/python version")
        start = _align(len(MAGIC) + 8 + length)
        if st.st_size != start + int(header["size"]):
            raise ValueError(f"truncated or padded: {st.st_size} bytes, the header says {start + header['size']}")
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    view = memoryview(mapped)[start:]
    if _checksum(view) != header.get("checksum"):
        raise ValueError("checksum mismatch (corrupted)")
    buffers = [view[o:o + n] for o, n in header["buffers"]]
    graph = pickle.loads(view[:header["pickle"]], buffers=buffers)
    if not isinstance(graph, Graph):
        raise ValueError(f"holds a {type(graph).__name__}, not a Graph")
    return graph


def _checksum(view: memoryview) -> str:
    """SHA-256 over the SHA-256 digests of the PIECE-byte pieces of ``view`` (and its length), the pieces
    hashed on up to 4 threads.

    NOTE: a flat SHA-256 runs on one core (~0.9 GB/s here: 0.6 s of VGG19's 1.35 s cached prepare for its
    548 MB of weights); hashlib releases the GIL on large buffers, so the pieces hash in parallel. The
    tree keeps SHA-256's collision resistance: a changed byte changes its piece's digest, hence the root.
    Reading the mapped pages in the hashing threads also faults them in on several cores."""
    n = view.nbytes
    starts = range(0, n, PIECE)
    if len(starts) <= 1:
        digests = [hashlib.sha256(view).digest()]
    else:
        with ThreadPoolExecutor(max_workers=min(4, len(starts), os.cpu_count() or 1)) as pool:
            digests = list(pool.map(lambda lo: hashlib.sha256(view[lo:lo + PIECE]).digest(), starts))
    return _root(n, digests)


def _checksum_of_parts(parts: list) -> str:
    """_checksum of the concatenation of ``parts``, computed piece by piece on this thread (writing an
    entry happens once per model; joining the parts would copy every weight)."""
    digests, piece, filled, n = [], hashlib.sha256(), 0, 0
    for part in parts:
        data = memoryview(part).cast("B")
        n += data.nbytes
        while data.nbytes:
            take = min(PIECE - filled, data.nbytes)
            piece.update(data[:take])
            data, filled = data[take:], filled + take
            if filled == PIECE:
                digests.append(piece.digest())
                piece, filled = hashlib.sha256(), 0
    if filled or not digests:
        digests.append(piece.digest())
    return _root(n, digests)


def _root(n: int, digests: list[bytes]) -> str:
    root = hashlib.sha256(struct.pack("<QQ", n, PIECE))
    for d in digests:
        root.update(d)
    return root.hexdigest()


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _write_atomic(path: Path, head: bytes, parts: list | None = None) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(head)
            for p in parts or ():
                f.write(p)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
