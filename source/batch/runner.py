"""The actor of a batch job: loads a part's rows, runs them on a Predictor, writes the part atomically."""
from __future__ import annotations

import json
import logging
import os
import uuid
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from nnhal.batch.inputs import count_rows, load_image, parquet_cells
from nnhal.batch.spec import JobSpec, Part
from nnhal.errors import InputError, NnhalError
from nnhal.ray import Predictor

log = logging.getLogger("nnhal.batch")


class PartRunner:
    """The actor of ``nnhal batch``: for each part row of a batch, load, predict and write the part file."""

    def __init__(self, job: JobSpec, output: str, attempts: Any = None) -> None:
        """``attempts``: the job's AttemptLog actor (None: nothing recorded), told of each part started here."""
        self.job, self.output = job, Path(output)
        self.attempts, self.node = attempts, _node_id()
        self.predictor = Predictor(job.model, devices=list(job.devices), precision=job.precision,
                                   num_thread=job.threads, batch_size=job.batch_size, on_error=job.on_error,
                                   key_column="key")
        self.mean, self.std = np.asarray(job.mean, np.float32), np.asarray(job.std, np.float32)
        # a part whose rows all failed still writes each output column with the type of the others
        tensors = self.predictor.session.graph.graph.tensors
        self.empty_rows = {column: np.zeros(tensors[name].shape[1:], tensors[name].dtype)
                           for name, column in self.predictor.output_columns.items()
                           if tensors[name].shape and all(isinstance(d, int) for d in tensors[name].shape[1:])}

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        done: dict[str, list] = {"part": [], "rows": [], "failed": [], "node": []}
        for index, items in zip(batch["part"], batch["items"]):
            part = Part(int(index), tuple(tuple(item) for item in json.loads(items)))
            self._record_start(part.index)
            failed = self.run_part(part)
            done["node"].append(self.node)
            done["part"].append(part.index)
            done["rows"].append(part.rows)
            done["failed"].append(json.dumps(failed))
        return {k: np.asarray(v) for k, v in done.items()}

    def _record_start(self, index: int) -> None:
        """Tell the job's AttemptLog this part starts here, and wait for it: an attempt is on record before
        its node can be lost. Best effort: when the log cannot be reached (this node is going down, its raylet
        already gone) the part runs anyway; an error here would fail the job, a missed record only a count."""
        if self.attempts is None:
            return
        import ray
        from ray.exceptions import RayError

        try:
            ray.get(self.attempts.start.remote(index, self.node), timeout=60)
        except RayError as exc:
            log.warning("nnhal batch: part %d: the attempt log is unreachable (%s); running it unrecorded", index, exc)

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
                    columns[specs[0].column].append(load_image(path, specs[0].row_shape, self.mean, self.std))
                except NnhalError as exc:
                    errors[len(keys) - 1] = str(exc)
                    columns[specs[0].column].append(None)
                continue
            base = len(keys)
            try:
                # NOTE: counted again: a file that could not be listed (one row) or lost rows since fails here
                rows = count_rows(self.job.kind, path)
                if rows < stop:
                    raise InputError(f"'{path}' holds {rows} row(s), fewer than the {stop} listed")
                arrays = self._read_rows(path, start, stop)
            except InputError as exc:
                arrays = {"__error__": str(exc)}
            except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
                # NOTE: the file changed or broke since it was listed: its rows fail, the part goes on
                arrays = {"__error__": f"cannot read rows {start}:{stop} of {name}: {exc}"}
            unreadable = arrays.pop("__error__", None)
            key_values = arrays.pop("__key__", None)
            if key_values is None:
                key_values = [f"{name}[{i}]" for i in range(start, stop)]
            keys.extend(str(k) for k in key_values)
            for i in range(stop - start) if unreadable else ():
                errors[base + i] = unreadable
            for spec in specs:
                values = arrays.get(spec.column)
                if values is None:
                    for i in range(stop - start):
                        errors.setdefault(base + i, f"no column '{spec.column}' for model input '{spec.name}' in "
                                                    f"{name}")
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
        arrays: dict[str, Any] = {s.column: parquet_cells(table.column(s.column), s.row_shape)
                                  for s in specs if s.column in table.column_names}
        if self.job.key_column:
            if self.job.key_column not in table.column_names:
                raise InputError(f"{path} has no key column '{self.job.key_column}'; its columns are "
                                 f"{table.column_names}")
            arrays["__key__"] = table.column(self.job.key_column).to_pylist()
        return arrays

    def write(self, part: Part, keys: list[str], errors: list[str | None], outputs: dict[str, list]) -> None:
        """Write the part under a temporary name in OUTPUT, then rename it: readers never see half a part."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        columns = {"key": pa.array(keys, pa.string()), "error": pa.array(errors, pa.string())}
        for column, values in outputs.items():
            columns[column] = _tensor_column(values, self.empty_rows.get(column))
        table = pa.table(columns).replace_schema_metadata({"nnhal.rows": str(part.rows)})
        final = self.output / part.name
        tmp = self.output / f".{part.name}.{uuid.uuid4().hex}.tmp"
        pq.write_table(table, tmp)
        # NOTE: flushed to disk before the rename, so a part file that exists after a crash is whole
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)


def _node_id() -> str:
    """The Ray node this process runs on ("" outside Ray)."""
    try:
        import ray
    except ImportError:
        return ""
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""


def _tensor_column(values: list[np.ndarray | None], empty: np.ndarray | None) -> Any:
    """Rows of one shape (None for a failed row) as nested fixed-size lists, null where a row failed.

    ``empty`` is a zero row of the output's static row shape and dtype (None when not static), which
    gives a part whose rows all failed the column type of the others."""
    import pyarrow as pa

    present = [v for v in values if v is not None] or ([] if empty is None else [empty])
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
