"""Options of a prerun, and typed per-device options."""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any

from nnhal.errors import DeviceError, OptionsError
from nnhal.optimizer.calibrate import CalibrationTable, as_ranges
from nnhal.optimizer.limits import MAX_FOLD_BYTES, MAX_GRAPH_BYTES, MAX_LOOP_TRIPS

PRECISIONS = ("fp32", "fp16", "int8", "uint8", "mixed")
PREFERENCES = ("order", "speed", "power")



@dataclass
class Options:
    """How a graph is prepared and run.

    num_thread     BLAS threads for the run (0 = one per core)
    precision      fp32, fp16, int8 or uint8: what devices are asked to run
    strict         a failing device is an error instead of a fallback to the CPU
    fold_constants evaluate constant subexpressions at prerun
    min_group_size groups of fewer nodes on a non-fallback device go to the CPU
    calibration    ranges for quantized precisions: what nnhal.calibrate returns
                   (a CalibrationTable), a dict tensor -> (min, max), or the path
                   of a table saved with CalibrationTable.save; held as the dict.
                   None = calibrate on the inputs set before prerun
    mixed_tolerance for precision="mixed": the largest relative (L2) output error
                   against fp32 on the calibration inputs
    keep_fp32      node names that stay in fp32 under a quantized precision
    progress       show a progress bar on stderr (when it is a TTY) for long prepares (mixed)
    prefer         how placement picks among the devices that accept a node: "order" (the first in the
                   context's priority list), "speed" or "power" (the lowest Description.performance
                   exec_time or power_usage at the node's precision, as NNAPI's execution preference;
                   ties go to the earlier device). Pins and denials win either way.
    shape_cache    how many prepared input shapes a Session keeps (an LRU; >= 1, 1 = one prepared
                   plan, as before issue 27): a run whose shapes are cached runs without preparing
                   again; a new shape prepares under the write lock, evicting the least recently used
                   entry when full (docs/concurrency.md#input-shapes)

    Bounds on prepare (a model is untrusted input: these keep prerun's memory and time bounded;
    each refusal is a nnhal.LimitError naming node, op and size):
    max_fold_bytes  the largest tensor constant folding materialises (bytes); a node whose output
                    would be larger is not folded and runs at run time
    max_loop_trips  the largest trip count of a Loop that constant folding runs; a Loop with more
                    trips (or no trip count) runs at run time
    max_graph_bytes the budget of the tensors a prepared graph allocates (activations and folded
                    constants), checked against the inferred shapes before anything is allocated
    """

    num_thread: int = 0
    precision: str = "fp32"
    strict: bool = False
    fold_constants: bool = True
    min_group_size: int = 1
    calibration: CalibrationTable | dict[str, tuple[float, float]] | str | os.PathLike | None = None
    mixed_tolerance: float = 0.01
    keep_fp32: frozenset[str] = frozenset()
    progress: bool = True
    prefer: str = "order"
    shape_cache: int = 4
    # ---- bounds on prepare
    max_fold_bytes: int = MAX_FOLD_BYTES
    max_loop_trips: int = MAX_LOOP_TRIPS
    max_graph_bytes: int = MAX_GRAPH_BYTES

    def __post_init__(self) -> None:
        if not _is_int(self.num_thread) or self.num_thread < 0:
            raise OptionsError(f"num_thread must be a non-negative int, got {self.num_thread!r}")
        if not _is_int(self.shape_cache) or self.shape_cache < 1:
            raise OptionsError(f"shape_cache must be an int >= 1 (input shapes kept prepared), got "
                               f"{self.shape_cache!r}")
        if not _is_int(self.min_group_size) or self.min_group_size < 1:
            raise OptionsError(f"min_group_size must be an int >= 1, got {self.min_group_size!r}")
        if not isinstance(self.precision, str) or self.precision not in PRECISIONS:
            raise OptionsError(f"precision must be one of {', '.join(PRECISIONS)}; got {self.precision!r}")
        for name in ("strict", "fold_constants", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise OptionsError(f"{name} must be True or False, got {getattr(self, name)!r}")
        tol = self.mixed_tolerance
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or not 0 < tol < 1e6:
            raise OptionsError(f"mixed_tolerance must be a finite number > 0 (a relative L2 error, e.g. 0.01 for "
                               f"1%), got {tol!r}")
        keep = self.keep_fp32
        if isinstance(keep, str) or not isinstance(keep, (set, frozenset, list, tuple)) \
                or not all(isinstance(k, str) for k in keep):
            raise OptionsError(f"keep_fp32 must be a set of node names, got {keep!r}")
        self.keep_fp32 = frozenset(keep)
        if self.prefer not in PREFERENCES:
            raise OptionsError(f"prefer must be one of {', '.join(PREFERENCES)}; got {self.prefer!r}")
        # -- calibration (issue 14): a table, a dict of ranges or a saved table's path -> the dict of ranges
        if self.calibration is not None:
            self.calibration = as_ranges(self.calibration)
        # -- bounds on prepare (issue 11)
        for name in ("max_fold_bytes", "max_loop_trips", "max_graph_bytes"):
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise OptionsError(f"{name} must be a non-negative int, got {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_device_options(device: str, schema: type | None, given: dict[str, Any] | None) -> Any:
    """Build the device's options dataclass from a dict; DeviceError on unknown keys or bad values."""
    given = dict(given or {})
    if schema is None:
        if given:
            raise DeviceError(f"device '{device}' takes no options; got {sorted(given)}")
        return None
    fields = {f.name: f for f in dataclasses.fields(schema)}
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise DeviceError(f"device '{device}' has no option(s) {unknown}; its options are {sorted(fields)}")
    try:
        return schema(**given)
    except (TypeError, ValueError) as exc:
        raise DeviceError(f"device '{device}': bad option value: {exc}") from exc
