"""The input of a batch job: listing it, cutting it into parts, reading one row of it."""
from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from nnhal.batch.spec import Part
from nnhal.errors import InputError, OptionsError

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"})


def _npz_rows(path: Path) -> int:
    """Rows of an .npz (the first dim shared by its arrays), read from the array headers only."""
    counts = set()
    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            with zf.open(name) as f:
                major, _ = np.lib.format.read_magic(f)
                read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
                shape, _, _ = read_header(f)
            if not shape:
                raise InputError(f"{path}: array '{name}' is a scalar; .npz inputs hold rows along axis 0")
            counts.add(shape[0])
    if len(counts) != 1:
        raise InputError(f"{path}: its arrays have different row counts {sorted(counts)}")
    return counts.pop()


def _parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.read_metadata(path).num_rows


def count_rows(kind: str, path: str) -> int:
    """Rows of one input file of ``kind``; InputError naming the file when it cannot be read."""
    counter = {"image": lambda p: 1, "npz": _npz_rows, "parquet": _parquet_rows}[kind]
    try:
        return counter(Path(path))
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:   # pyarrow's ArrowInvalid is a ValueError
        raise InputError(f"cannot read the row count of '{path}': {exc}") from exc


def list_input(path: str, on_error: str = "fail") -> tuple[str, list[tuple[str, int]]]:
    """(kind, [(file, rows)]) of an input path: a file or a folder of one kind of file, sorted by name.

    A file whose rows cannot be counted raises InputError naming it with ``on_error='fail'``; with 'skip' it
    is listed as one row, which its reader (PartRunner.load) reports as failed with the same error."""
    root = Path(path)
    if root.is_dir():
        files = sorted(p for p in root.iterdir() if p.is_file() and not p.name.startswith("."))
    elif root.is_file():
        files = [root]
    else:
        raise InputError(f"input '{path}' does not exist")
    kinds = {"image" if p.suffix.lower() in IMAGE_SUFFIXES else p.suffix.lower().lstrip(".") for p in files}
    kinds &= {"image", "npz", "parquet"}
    if len(kinds) != 1:
        found = sorted(kinds) or "no images, .npz or .parquet files"
        raise InputError(f"input '{path}' must hold one kind of file (images, .npz or .parquet); found {found}")
    kind = kinds.pop()

    def suffix_ok(p: Path) -> bool:
        return p.suffix.lower() in IMAGE_SUFFIXES if kind == "image" else p.suffix == f".{kind}"
    listed = []
    for p in filter(suffix_ok, files):
        try:
            listed.append((str(p), count_rows(kind, str(p))))
        except InputError:
            if on_error == "fail":
                raise
            listed.append((str(p), 1))
    return kind, listed


def plan_parts(files: list[tuple[str, int]], rows_per_part: int) -> list[Part]:
    """Cut the listed rows, in order, into parts of ``rows_per_part`` rows (the last may be shorter)."""
    if rows_per_part < 1:
        raise OptionsError(f"rows_per_part must be >= 1, got {rows_per_part}")
    parts, items, filled = [], [], 0
    for name, rows in files:
        start = 0
        while start < rows:
            take = min(rows - start, rows_per_part - filled)
            items.append((name, start, start + take))
            start, filled = start + take, filled + take
            if filled == rows_per_part:
                parts.append(Part(len(parts), tuple(items)))
                items, filled = [], 0
    if items:
        parts.append(Part(len(parts), tuple(items)))
    return parts


def load_image(path: str, shape: tuple[int | None, ...], mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """One image as the model's CHW float row: grey or RGB by C, resized to HxW, scaled to [0, 1], normalised."""
    try:
        from PIL import Image
    except ImportError as exc:
        raise OptionsError("image inputs need Pillow: pip install 'nnhal[ray]'") from exc
    if len(shape) != 3 or shape[0] not in (1, 3) or None in shape[1:]:
        raise InputError(f"image inputs need a model input of shape [N, 1|3, H, W]; this one has rows {list(shape)}")
    channels, height, width = shape
    try:
        with Image.open(path) as img:
            img = img.convert("L" if channels == 1 else "RGB").resize((width, height), Image.BILINEAR)
            pixels = np.asarray(img, dtype=np.float32) / 255.0
    except (OSError, ValueError) as exc:          # PIL's UnidentifiedImageError is an OSError
        raise InputError(f"cannot decode image: {exc}") from exc
    chw = pixels[None] if channels == 1 else pixels.transpose(2, 0, 1)
    return (chw - mean.reshape(-1, 1, 1)) / std.reshape(-1, 1, 1)


def parquet_cells(column: Any, shape: tuple[int | None, ...]) -> list[Any]:
    """A parquet column as one array per row; a flat list of the right size is reshaped to the row shape."""
    size = int(np.prod(shape)) if None not in shape else -1
    cells = []
    for value in column.to_pylist():
        try:
            cell = np.asarray(value) if value is not None else None
        except ValueError as exc:                 # a ragged nested list
            cell = f"ragged value: {exc}"
        if isinstance(cell, np.ndarray) and cell.ndim == 1 and len(shape) > 1 and cell.size == size:
            cell = cell.reshape(shape)
        cells.append(cell)
    return cells
