"""``nnhal batch MODEL INPUT OUTPUT``: a model over a data set on Ray Data, written as parquet parts.

The input (a folder of images, one .npz or a folder of them, one .parquet or a
folder of them) is listed on the driver and cut into *parts* of
``rows_per_part`` rows. Each part is one row of a Ray Dataset; a pool of actors
(``nnhal.ray.PartRunner``'s here, each holding a ``nnhal.ray.Predictor``)
loads its rows, runs them and writes ``OUTPUT/part-NNNNN.parquet`` under a
temporary name, then renames it: a part file that exists is complete. A rerun
skips complete parts, so a stopped job resumes and nothing written is lost.

An output part has one row per input row: ``key`` (the file name, or
``name.npz[i]``, or the ``--key`` column), ``error`` (null, or why the row did
not run) and one column per model output (null where error is set), as nested
fixed-size lists of the output's row shape.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
import uuid
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nnhal.errors import InputError, NnhalError, OptionsError
from nnhal.ray import Predictor, actor_options, device_resources

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"})
MANIFEST = "_nnhal_batch.json"


@dataclass(frozen=True)
class JobSpec:
    """Everything a job needs, picklable: what runs (model and Session options) and what is read."""

    model: str
    kind: str                                   # "image", "npz" or "parquet"
    devices: tuple[str, ...] = ("cpu",)
    precision: str = "fp32"
    threads: int = 1
    batch_size: int | None = None
    on_error: str = "skip"
    key_column: str | None = None
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)


@dataclass(frozen=True)
class Part:
    """Rows ``start:stop`` of each listed file, in order: one output file."""

    index: int
    items: tuple[tuple[str, int, int], ...]

    @property
    def rows(self) -> int:
        return sum(stop - start for _, start, stop in self.items)

    @property
    def name(self) -> str:
        return f"part-{self.index:05d}.parquet"


@dataclass
class JobReport:
    """What a job did: parts skipped (complete before), parts written now, rows run and rows failed."""

    parts: int
    skipped: int
    written: int = 0
    rows: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0


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


def list_input(path: str) -> tuple[str, list[tuple[str, int]]]:
    """(kind, [(file, rows)]) of an input path: a file or a folder of one kind of file, sorted by name."""
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
    counts = {"image": lambda p: 1, "npz": _npz_rows, "parquet": _parquet_rows}[kind]
    suffix_ok = (lambda p: p.suffix.lower() in IMAGE_SUFFIXES) if kind == "image" else (lambda p: p.suffix == f".{kind}")
    return kind, [(str(p), counts(p)) for p in files if suffix_ok(p)]


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


def _load_image(path: str, shape: tuple[int | None, ...], mean: np.ndarray, std: np.ndarray) -> np.ndarray:
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


def _cells(column: Any, shape: tuple[int | None, ...]) -> list[Any]:
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


class PartRunner:
    """The actor of ``nnhal batch``: for each part row of a batch, load, predict and write the part file."""

    def __init__(self, job: JobSpec, output: str) -> None:
        self.job, self.output = job, Path(output)
        self.predictor = Predictor(job.model, devices=list(job.devices), precision=job.precision,
                                   num_thread=job.threads, batch_size=job.batch_size, on_error=job.on_error,
                                   key_column="key")
        self.mean, self.std = np.asarray(job.mean, np.float32), np.asarray(job.std, np.float32)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        done: dict[str, list] = {"part": [], "rows": [], "failed": []}
        for index, items in zip(batch["part"], batch["items"]):
            part = Part(int(index), tuple(tuple(item) for item in json.loads(items)))
            failed = self.run_part(part)
            done["part"].append(part.index)
            done["rows"].append(part.rows)
            done["failed"].append(json.dumps(failed))
        return {k: np.asarray(v) for k, v in done.items()}

    def run_part(self, part: Part) -> list[tuple[str, str]]:
        """Run one part and write its file atomically; returns the (key, error) of the rows that failed."""
        keys, columns, errors = self.load(part)
        if errors and self.job.on_error == "fail":
            first = min(errors)
            raise InputError(f"{keys[first]}: {errors[first]}")
        good = [i for i in range(len(keys)) if i not in errors]
        feed = {"key": np.asarray([keys[i] for i in good], dtype=object)}
        feed.update({name: [cells[i] for i in good] for name, cells in columns.items()})
        pred = self.predictor.predict(feed)
        for j, why in pred.errors.items():
            errors[good[j]] = why
        outputs: dict[str, list] = {c: [None] * len(keys) for c in pred.outputs}
        ran = [i for j, i in enumerate(good) if pred.ok[j]]
        for column, values in pred.outputs.items():
            for i, value in zip(ran, values):
                outputs[column][i] = value
        self.write(part, keys, [errors.get(i) for i in range(len(keys))], outputs)
        return [(keys[i], errors[i]) for i in sorted(errors)]

    def load(self, part: Part) -> tuple[list[str], dict[str, list], dict[int, str]]:
        """Keys, per model input one value per row, and the rows that could not be read (index -> why)."""
        specs = self.predictor.specs
        keys: list[str] = []
        columns: dict[str, list] = {s.column: [] for s in specs}
        errors: dict[int, str] = {}
        for path, start, stop in part.items:
            name = Path(path).name
            if self.job.kind == "image":
                keys.append(name)
                try:
                    columns[specs[0].column].append(_load_image(path, specs[0].row_shape, self.mean, self.std))
                except NnhalError as exc:
                    errors[len(keys) - 1] = str(exc)
                    columns[specs[0].column].append(None)
                continue
            arrays = self._read_rows(path, start, stop)
            base = len(keys)
            key_values = arrays.pop("__key__", None)
            if key_values is None:
                key_values = [f"{name}[{i}]" for i in range(start, stop)]
            keys.extend(str(k) for k in key_values)
            for spec in specs:
                values = arrays.get(spec.column)
                if values is None:
                    for i in range(stop - start):
                        errors.setdefault(base + i, f"no column '{spec.column}' for model input '{spec.name}' in {name}")
                    values = [None] * (stop - start)
                columns[spec.column].extend(values)
            for i in range(stop - start):
                bad = [s.column for s in specs if isinstance(columns[s.column][base + i], str)]
                if bad:
                    errors.setdefault(base + i, f"column '{bad[0]}': {columns[bad[0]][base + i]}")
        return keys, columns, errors

    def _read_rows(self, path: str, start: int, stop: int) -> dict[str, Any]:
        specs = self.predictor.specs
        if self.job.kind == "npz":
            with np.load(path, allow_pickle=False) as npz:
                if len(specs) == 1 and specs[0].column not in npz.files and len(npz.files) == 1:
                    return {specs[0].column: list(npz[npz.files[0]][start:stop])}
                return {k: list(npz[k][start:stop]) for k in npz.files}
        import pyarrow.parquet as pq

        table = pq.read_table(path).slice(start, stop - start)
        arrays: dict[str, Any] = {s.column: _cells(table.column(s.column), s.row_shape)
                                  for s in specs if s.column in table.column_names}
        if self.job.key_column:
            if self.job.key_column not in table.column_names:
                raise InputError(f"{path} has no key column '{self.job.key_column}'; its columns are {table.column_names}")
            arrays["__key__"] = table.column(self.job.key_column).to_pylist()
        return arrays

    def write(self, part: Part, keys: list[str], errors: list[str | None], outputs: dict[str, list]) -> None:
        """Write the part under a temporary name in OUTPUT, then rename it: readers never see half a part."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        columns = {"key": pa.array(keys, pa.string()), "error": pa.array(errors, pa.string())}
        for column, values in outputs.items():
            columns[column] = _tensor_column(values)
        table = pa.table(columns).replace_schema_metadata({"nnhal.rows": str(part.rows)})
        final = self.output / part.name
        tmp = self.output / f".{part.name}.{uuid.uuid4().hex}.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, final)


def _tensor_column(values: list[np.ndarray | None]) -> Any:
    """Rows of one shape (None for a failed row) as nested fixed-size lists, null where a row failed."""
    import pyarrow as pa

    present = [v for v in values if v is not None]
    if not present:
        return pa.nulls(len(values), pa.float32())
    shape, dtype = present[0].shape, present[0].dtype
    flat = np.stack([v if v is not None else np.zeros(shape, dtype) for v in values]).reshape(-1)
    mask = pa.array([v is None for v in values])
    if not shape:
        return pa.array(flat, mask=mask.to_numpy(zero_copy_only=False))
    array: Any = pa.array(flat)
    for dim in reversed(shape[1:]):
        array = pa.FixedSizeListArray.from_arrays(array, dim)
    return pa.FixedSizeListArray.from_arrays(array, shape[0], mask=mask)


def complete_parts(output: Path, parts: list[Part]) -> set[int]:
    """The parts whose final file is in OUTPUT with its full row count (temporary files are removed)."""
    import pyarrow.parquet as pq

    for stale in output.glob(".part-*.tmp"):
        stale.unlink()
    done = set()
    for part in parts:
        path = output / part.name
        if path.is_file():
            try:
                meta = pq.read_metadata(path)
            except (OSError, ValueError):
                continue
            if meta.num_rows == part.rows:
                done.add(part.index)
    return done


def _check_manifest(output: Path, job: JobSpec, source: str, parts: list[Part]) -> None:
    """Refuse to resume into OUTPUT when it holds another job (another model, input, options or parts)."""
    digest = hashlib.sha256(json.dumps([p.items for p in parts]).encode()).hexdigest()
    # NOTE: threads and on_error do not change what a part holds, so a rerun may change them
    fields = {k: v for k, v in asdict(job).items() if k not in ("threads", "on_error")}
    manifest = json.loads(json.dumps({"input": str(Path(source).resolve()), "parts": len(parts), "plan": digest,
                                      **fields}))
    path = output / MANIFEST
    if path.is_file():
        before = json.loads(path.read_text())
        changed = sorted(k for k in set(manifest) | set(before) if before.get(k) != manifest.get(k))
        if changed:
            raise OptionsError(f"output '{output}' holds the parts of another job (it differs in "
                               f"{', '.join(changed)}); rerun with the same arguments to resume, or choose a "
                               "new output folder")
        return
    tmp = output / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, path)


def run_job(job: JobSpec, source: str, output: str, rows_per_part: int = 64, actors: int = 2,
            resources: dict[str, float] | None = None, runner: type = PartRunner) -> JobReport:
    """Run a job on the Ray cluster this process is connected to; parts already complete are skipped."""
    import ray.data

    t0 = time.perf_counter()
    _, files = list_input(source)
    parts = plan_parts(files, rows_per_part)
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    _check_manifest(out, job, source, parts)
    done = complete_parts(out, parts)
    pending = [p for p in parts if p.index not in done]
    report = JobReport(parts=len(parts), skipped=len(done))
    if pending:
        ds = ray.data.from_items([{"part": p.index, "items": json.dumps(p.items)} for p in pending],
                                 override_num_blocks=len(pending))
        resources = device_resources(list(job.devices)) if resources is None else resources
        ds = ds.map_batches(runner, fn_constructor_kwargs={"job": job, "output": str(out)}, batch_size=1,
                            batch_format="numpy",
                            **actor_options(min(actors, len(pending)), job.threads, resources=resources))
        for row in ds.iter_rows():
            report.written += 1
            report.rows += int(row["rows"])
            report.failed.extend((key, why) for key, why in json.loads(row["failed"]))
    report.seconds = time.perf_counter() - t0
    return report


def _nnhal_error(exc: BaseException) -> NnhalError | None:
    """The NnhalError a Ray task raised. Ray Data re-raises a UDF's error as UserCodeException, keeping
    only its traceback text, so the last ``nnhal.errors.<Class>: message`` line of it is rebuilt."""
    from nnhal import errors

    if isinstance(exc, NnhalError):
        return exc
    found = re.findall(r"^(?:nnhal\.errors\.)?(\w+Error): (.*)$", str(exc), flags=re.MULTILINE)
    for name, message in reversed(found):
        cls = getattr(errors, name, None)
        if isinstance(cls, type) and issubclass(cls, NnhalError):
            return cls(message)
    return None


def _floats(text: str, what: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError as exc:
        raise OptionsError(f"{what} takes comma-separated numbers, got '{text}'") from exc


def run_cli(args: Any) -> int:
    """``nnhal batch``: connect to (or start) Ray, run the job, print what was done and what failed."""
    try:
        import ray
    except ImportError as exc:
        raise OptionsError("nnhal batch runs on Ray Data: pip install 'nnhal[ray]'") from exc
    import nnhal

    kind, _ = list_input(args.input)
    devices = tuple(d for d in args.device.split(",") if d)
    job = JobSpec(model=args.model, kind=kind, devices=devices, precision=args.precision, threads=args.threads,
                  batch_size=args.batch_size, on_error=args.on_error, key_column=args.key,
                  mean=_floats(args.mean, "--mean"), std=_floats(args.std, "--std"))
    resources = dict(device_resources(list(devices)))
    for spec in args.resource:
        name, sep, amount = spec.partition("=")
        if not sep:
            raise OptionsError(f"--resource takes NAME=AMOUNT (per actor), got '{spec}'")
        resources[name] = float(_floats(amount, "--resource")[0])
    started = not ray.is_initialized()
    if started and args.address:
        ray.init(address=args.address)
    elif started:
        # NOTE: the embedded single-machine cluster offers each locally registered device to every actor
        nnhal.init()
        local = {d.name for d in nnhal.devices()}
        offered = {r: float(args.actors) for r in resources if r.removeprefix("nnhal_") in local}
        ray.init(num_cpus=args.num_cpus, include_dashboard=False, resources=offered or None)
    try:
        from nnhal.ray import check_resources

        if resources:
            check_resources(resources)
        report = run_job(job, args.input, args.output, args.rows_per_part, args.actors, resources)
    except Exception as exc:   # Ray wraps the task's error; find ours, or report Ray's own
        found = _nnhal_error(exc)
        complete = len(list(Path(args.output).glob("part-*.parquet"))) if Path(args.output).is_dir() else 0
        kept = f"; {complete} complete part(s) in {args.output} are kept, run again to resume"
        if found is not None:
            raise type(found)(f"{found}{kept}") from exc
        if isinstance(exc, NnhalError):
            raise
        raise NnhalError(f"the Ray job failed: {str(exc).strip().splitlines()[-1]}{kept}") from exc
    finally:
        if started:
            ray.shutdown()
    rate = report.rows / report.seconds if report.seconds else 0.0
    print(f"nnhal batch: {report.parts} part(s): {report.skipped} complete before (skipped), {report.written} "
          f"written; {report.rows} row(s) in {report.seconds:.1f} s ({rate:.2f} rows/s)")
    print(f"output: {args.output}/part-*.parquet (columns key, error, one per model output)")
    if report.failed:
        print(f"{len(report.failed)} row(s) failed and were skipped (error column set):")
        for key, why in report.failed[:args.show_errors]:
            print(f"  {key}: {why}")
        if len(report.failed) > args.show_errors:
            print(f"  ... and {len(report.failed) - args.show_errors} more")
    return 0
