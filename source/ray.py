"""nnhal on Ray Data: one prepared Session per actor, used through ``Dataset.map_batches``.

    import ray, nnhal.ray
    ds = ray.data.read_parquet("images.parquet")
    out = nnhal.ray.map_batches(ds, "model.onnx", actors=4, threads=2)       # a new column per model output
    # or, by hand: ds.map_batches(nnhal.ray.Predictor, fn_constructor_kwargs={...}, **nnhal.ray.actor_options(...))

``Predictor`` is a plain callable class: it imports no Ray and can be tested
without a cluster. Batch columns are matched to model inputs by name (or by the
``inputs`` mapping), each model output becomes a column. Rows are grouped by
their shape, cut into runs of the model's batch size and the last run padded
(repeating its last row), so a prepared graph sees one shape per group and is
never prepared again for a short tail. Install with ``pip install "nnhal[ray]"``.

``connect(address)`` joins an existing cluster ('auto', 'HOST:PORT', 'ray://HOST:PORT') with Ray's token
authentication and fails with a ClusterError that says what to check; ``disconnect()`` leaves it.
"""
from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nnhal.errors import ClusterError, DeviceError, InputError, ModelError, NnhalError, OptionsError
from nnhal.session import Session

log = logging.getLogger("nnhal.ray")

# NOTE: one actor per accelerator by default; a node advertises what it has with
# `ray start --resources='{"nnhal_vnpu": 2}'` and Ray places actors only there.
RESOURCE_PREFIX = "nnhal_"
DEFAULT_RUN_BATCH = 8
ON_ERROR = ("skip", "fail")


def device_resources(devices: list[str] | None) -> dict[str, float]:
    """The custom Ray resource each actor needs for the non-CPU devices it lists: {"nnhal_vnpu": 1}."""
    return {f"{RESOURCE_PREFIX}{d}": 1.0 for d in devices or [] if d != "cpu"}


def actor_options(actors: int = 2, threads: int = 1, cpus_per_actor: float | None = None,
                  gpus_per_actor: float = 0, resources: dict[str, float] | None = None,
                  max_restarts: int | None = None, max_task_retries: int | None = None) -> dict[str, Any]:
    """``map_batches`` keyword arguments for a pool of ``actors`` Predictors of ``threads`` threads each.

    num_cpus per actor defaults to its threads (Ray also sets OMP_NUM_THREADS to it); ``resources`` are
    custom per-actor resources such as device_resources(devices). An actor that dies is restarted and its
    batch retried: Ray Data's actor pools default to max_restarts=-1 and max_task_retries=-1 (no limit);
    pass numbers to bound them.
    """
    from ray.data import ActorPoolStrategy

    if not isinstance(actors, int) or actors < 1:
        raise OptionsError(f"actors must be an int >= 1, got {actors!r}")
    if not isinstance(threads, int) or threads < 1:
        raise OptionsError(f"threads must be an int >= 1 (one BLAS pool per actor), got {threads!r}")
    options: dict[str, Any] = {"compute": ActorPoolStrategy(size=actors), "num_cpus": float(cpus_per_actor or threads)}
    if gpus_per_actor:
        options["num_gpus"] = gpus_per_actor
    if resources:
        options["resources"] = dict(resources)
    if max_restarts is not None:
        options["max_restarts"] = max_restarts
    if max_task_retries is not None:
        options["max_task_retries"] = max_task_retries
    return options


@dataclass(frozen=True)
class InputSpec:
    """One model input: its batch column, dtype and the shape of one row (None = any size)."""

    name: str
    column: str
    dtype: np.dtype
    row_shape: tuple[int | None, ...]


@dataclass
class Prediction:
    """What ``Predictor.predict`` made of a batch: outputs for the rows that ran, errors for the others."""

    ok: np.ndarray                                  # bool per input row
    outputs: dict[str, np.ndarray]                  # column -> array over the ok rows, in row order
    errors: dict[int, str] = field(default_factory=dict)   # row index -> why it did not run


class Predictor:
    """A ``map_batches`` callable class: prepares one nnhal.Session per actor and runs batches on it.

    model         a path, ONNX bytes, an onnx.ModelProto or 'zoo:<name>[?weights=random]'
    devices, precision, num_thread, device_options, calibration, min_group_size: as nnhal.Session
    inputs        model input -> batch column (default: same name)
    outputs       model output -> new column (default: same name)
    batch_size    rows per run for a model whose batch dim is free (a fixed batch dim is used as is)
    on_error      'skip': a row that cannot run (shape, dtype, a failing run) is dropped and logged with
                  its key; 'fail': it raises InputError naming the row
    key_column    the column that names a row in reports (default: its index in the batch)
    keep_columns  the input columns copied to the output (None: all of them)
    """

    # NOTE: num_thread defaults to 1, not to one per core: several actors share a node, and each
    # asks Ray for as many CPUs as it runs threads.
    def __init__(self, model: Any, devices: list[str] | None = None, precision: str = "fp32",
                 num_thread: int = 1, device_options: dict[str, dict] | None = None,
                 calibration: dict | None = None, min_group_size: int = 1,
                 inputs: dict[str, str] | None = None, outputs: dict[str, str] | None = None,
                 batch_size: int | None = None, on_error: str = "skip", key_column: str | None = None,
                 keep_columns: list[str] | None = None) -> None:
        if on_error not in ON_ERROR:
            raise OptionsError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        if precision in ("int8", "uint8", "mixed") and calibration is None:
            # NOTE: without ranges each actor would calibrate on whichever batch reaches it first, and
            # the same row would get different results depending on scheduling.
            raise OptionsError(f"precision '{precision}' on several actors needs calibration ranges: pass "
                               "calibration=nnhal.calibrate(model, feeds).ranges so every actor quantizes alike")
        if isinstance(model, str) and model.startswith("zoo:"):
            from nnhal.zoo import resolve

            model = resolve(model)
        self.session = Session(model, devices=devices, precision=precision, num_thread=num_thread,
                               device_options=device_options, calibration=calibration,
                               min_group_size=min_group_size, name="ray-actor")
        self.on_error, self.key_column, self.keep_columns = on_error, key_column, keep_columns
        tensors = self.session.graph.graph.tensors
        inputs = inputs or {}
        unknown = sorted(set(inputs) - set(self.session.input_names))
        if unknown:
            raise InputError(f"inputs maps {unknown}, which the model lacks; its inputs are {self.session.input_names}")
        unknown = sorted(set(outputs or {}) - set(self.session.output_names))
        if unknown:
            raise InputError(f"outputs maps {unknown}, which the model lacks; its outputs are "
                             f"{self.session.output_names}")
        self.specs = [self._spec(n, inputs.get(n, n), tensors[n]) for n in self.session.input_names]
        self.output_columns = {n: (outputs or {}).get(n, n) for n in self.session.output_names}
        self.run_batch = self._run_batch(batch_size)

    @staticmethod
    def _spec(name: str, column: str, tensor: Any) -> InputSpec:
        if tensor.shape is None or len(tensor.shape) == 0:
            raise ModelError(f"model input '{name}' has no batch dimension (shape {tensor.shape}); "
                             "nnhal.ray runs models whose inputs are batched along axis 0")
        return InputSpec(name, column, np.dtype(tensor.dtype), tuple(tensor.shape[1:]))

    def _run_batch(self, batch_size: int | None) -> int:
        tensors = self.session.graph.graph.tensors
        fixed = {tensors[s.name].shape[0] for s in self.specs} - {None}
        if len(fixed) > 1:
            raise ModelError(f"the model's inputs fix different batch sizes {sorted(fixed)}")
        if fixed:
            size = fixed.pop()
            if batch_size not in (None, size):
                raise OptionsError(f"the model fixes its batch size to {size}; batch_size={batch_size} cannot apply")
            return size
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise OptionsError(f"batch_size must be an int >= 1, got {batch_size!r}")
        return batch_size or DEFAULT_RUN_BATCH

    def key(self, batch: dict[str, Any], row: int) -> str:
        """How reports name row ``row`` of ``batch``."""
        if self.key_column and self.key_column in batch:
            return str(batch[self.key_column][row])
        return f"row {row}"

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The map_batches face: the kept input columns of the rows that ran, plus one column per output."""
        pred = self.predict(batch)
        for row, why in pred.errors.items():
            log.warning("nnhal.ray: skipped %s: %s", self.key(batch, row), why)
        kept = batch if self.keep_columns is None else {c: batch[c] for c in self.keep_columns}
        out = {c: np.asarray(v)[pred.ok] for c, v in kept.items()}
        out.update(pred.outputs)
        return out

    def predict(self, batch: dict[str, Any]) -> Prediction:
        """Run every row of ``batch``; with on_error='fail' the first bad row raises InputError."""
        missing = [s.column for s in self.specs if s.column not in batch]
        if missing:
            raise InputError(f"the batch has no column(s) {missing} for the model inputs; its columns are "
                             f"{sorted(batch)} (map them with inputs={{model_input: column}})")
        n = len(batch[self.specs[0].column])
        errors: dict[int, str] = {}
        rows = self._rows(batch, n, errors)
        if self.on_error == "fail" and errors:
            first = min(errors)
            raise InputError(f"{self.key(batch, first)}: {errors[first]}")
        groups: dict[tuple, list[int]] = {}
        for i in range(n):
            if i not in errors:
                groups.setdefault(tuple(rows[s.name][i].shape for s in self.specs), []).append(i)
        results: dict[int, list[np.ndarray]] = {}
        for members in groups.values():
            for start in range(0, len(members), self.run_batch):
                self._run_chunk(batch, rows, members[start:start + self.run_batch], results, errors)
        ok = np.array([i in results for i in range(n)], dtype=bool)
        outputs = {}
        for k, column in enumerate(self.output_columns.values()):
            done = [results[i][k] for i in range(n) if ok[i]]
            outputs[column] = np.stack(done) if done else np.zeros((0,), np.float32)
        return Prediction(ok, outputs, dict(sorted(errors.items())))

    def _rows(self, batch: dict[str, Any], n: int, errors: dict[int, str]) -> dict[str, list[np.ndarray]]:
        """Per input, one array per row, cast to the model's dtype; a row that does not fit goes to errors."""
        rows: dict[str, list[np.ndarray]] = {}
        for spec in self.specs:
            column = batch[spec.column]
            if len(column) != n:
                raise InputError(f"column '{spec.column}' has {len(column)} rows, '{self.specs[0].column}' {n}")
            cells = []
            for i in range(n):
                cell, why = self._cell(spec, column[i])
                if why is not None:
                    cell = np.zeros(0, spec.dtype)
                    errors.setdefault(i, why)
                cells.append(cell)
            rows[spec.name] = cells
        return rows

    @staticmethod
    def _cell(spec: InputSpec, value: Any) -> tuple[np.ndarray, str | None]:
        try:
            array = np.asarray(value)
        except (ValueError, TypeError) as exc:
            return np.zeros(0), f"input '{spec.name}' (column '{spec.column}'): not an array: {exc}"
        if array.dtype == object or not np.can_cast(array.dtype, spec.dtype, "same_kind"):
            return array, (f"input '{spec.name}' (column '{spec.column}') expects {spec.dtype}, "
                           f"got {array.dtype} that does not cast to it")
        if array.ndim != len(spec.row_shape) or any(d is not None and d != s for d, s in
                                                   zip(spec.row_shape, array.shape)):
            want = "x".join("?" if d is None else str(d) for d in spec.row_shape) or "scalar"
            return array, (f"input '{spec.name}' (column '{spec.column}') expects rows of shape [{want}], "
                           f"got {list(array.shape)}")
        return array.astype(spec.dtype, copy=False), None

    def _run_chunk(self, batch: dict[str, Any], rows: dict[str, list[np.ndarray]], members: list[int],
                   results: dict[int, list[np.ndarray]], errors: dict[int, str]) -> None:
        """Run ``members`` padded to the run batch; when the run fails, find the bad row(s) one by one."""
        pad = self.run_batch - len(members)
        order = members + [members[-1]] * pad
        feeds = {s.name: np.stack([rows[s.name][i] for i in order]) for s in self.specs}
        try:
            outs = self.session.run(feeds)
        except NnhalError as exc:
            if len(members) > 1:
                for i in members:
                    self._run_chunk(batch, rows, [i], results, errors)
                return
            if self.on_error == "fail":
                raise InputError(f"{self.key(batch, members[0])}: {exc}") from exc
            errors[members[0]] = f"{type(exc).__name__}: {exc}"
            return
        for k, out in enumerate(outs):
            if out.ndim == 0 or out.shape[0] != self.run_batch:
                raise ModelError(f"model output '{self.session.output_names[k]}' has shape {list(out.shape)}: "
                                 f"not batched along axis 0 like its inputs (batch {self.run_batch})")
        for j, i in enumerate(members):
            results[i] = [out[j] for out in outs]

    def close(self) -> None:
        self.session.close()


def run_batch_size(model: Any, batch_size: int | None = None) -> int:
    """The rows per run a Predictor will use for ``model`` (its fixed batch dim, else batch_size or 8),
    read from the ONNX graph on the driver without preparing anything."""
    import onnx

    from nnhal.zoo import resolve

    proto = resolve(model) if isinstance(model, str) else model
    if isinstance(proto, (str, bytes)):
        proto = onnx.load_from_string(proto) if isinstance(proto, bytes) else onnx.load(proto, load_external_data=False)
    inits = {i.name for i in proto.graph.initializer}
    dims = {vi.type.tensor_type.shape.dim[0].dim_value for vi in proto.graph.input
            if vi.name not in inits and vi.type.tensor_type.shape.dim
            and vi.type.tensor_type.shape.dim[0].HasField("dim_value")}
    return dims.pop() if len(dims) == 1 else batch_size or DEFAULT_RUN_BATCH


def check_resources(resources: dict[str, float]) -> None:
    """Raise DeviceError when the connected Ray cluster offers none of a custom resource (actors would wait forever)."""
    import ray

    available = ray.cluster_resources()
    missing = sorted(r for r in resources if available.get(r, 0) < resources[r])
    if missing:
        raise DeviceError(f"no Ray node offers {missing}; start the nodes that have the device with "
                          f"ray start --resources='{{\"{missing[0]}\": 1}}' (or pass resources={{}} to run anywhere)")


def map_batches(ds: Any, model: Any, *, actors: int = 2, threads: int = 1, devices: list[str] | None = None,
                rows_per_batch: int | None = None, resources: dict[str, float] | None = None,
                gpus_per_actor: float = 0, **predictor: Any) -> Any:
    """``ds.map_batches(Predictor, ...)`` with a pool of ``actors`` actors of ``threads`` threads each.

    Ray's batches are ``rows_per_batch`` rows (default: 4 runs of the model's batch size). ``resources``
    default to device_resources(devices) and are checked against the cluster. ``predictor`` takes the
    other Predictor arguments (precision, calibration, inputs, outputs, batch_size, on_error, ...).
    """
    resources = device_resources(devices) if resources is None else resources
    if resources:
        check_resources(resources)
    run = run_batch_size(model, predictor.get("batch_size"))
    kwargs = dict(model=model, devices=devices, num_thread=threads, **predictor)
    return ds.map_batches(Predictor, fn_constructor_kwargs=kwargs, batch_size=rows_per_batch or 4 * run,
                          batch_format="numpy",
                          **actor_options(actors, threads, gpus_per_actor=gpus_per_actor, resources=resources))


# ------------------------------------------------------------------ connecting to a cluster
# NOTE: Ray's token authentication (ray.io/ray-security/token-auth): a process sends the cluster's token when
# RAY_AUTH_MODE=token, taking it from RAY_AUTH_TOKEN, else the file RAY_AUTH_TOKEN_PATH names, else
# ~/.ray/auth_token. `ray start --head` and ray.init(address="auto") turn token mode on by themselves when a
# token exists; ray.init with an explicit address never does, so a default-path token is not sent to any
# address typed. nnhal keeps that rule and adds two cases where the token's owner is not in doubt: a token the
# user named for this process (RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH set), and a cluster on this machine.
AUTH_MODE, AUTH_TOKEN, AUTH_TOKEN_PATH = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"
DEFAULT_TOKEN_FILE = "~/.ray/auth_token"
AUTH_HELP = (f"a cluster with token authentication needs {AUTH_MODE}=token and its token in {AUTH_TOKEN}, "
             f"or in the file {AUTH_TOKEN_PATH} names, or in {DEFAULT_TOKEN_FILE} "
             "(`ray get-auth-token` on the head node prints it)")
_changed_env: dict[str, str | None] = {}


def _split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise OptionsError(f"--address takes auto, HOST:PORT or ray://HOST:PORT, got '{address}'")
    return host.strip("[]"), int(port)


def _is_local_gcs(host: str, port: int) -> bool:
    """Whether HOST:PORT is a GCS server that runs on this machine (Ray lists them from the process table)."""
    import socket

    from ray._private import services

    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, 0))                   # binds only to an address of this machine
    except OSError:
        return False
    return any(a.rpartition(":")[2] == str(port) for a in services.find_gcs_addresses())


def _token_source() -> str | None:
    """Where Ray will read the token from, in its order of precedence; None without one."""
    if os.environ.get(AUTH_TOKEN):
        return AUTH_TOKEN
    if os.environ.get(AUTH_TOKEN_PATH):
        return f"{AUTH_TOKEN_PATH}={os.environ[AUTH_TOKEN_PATH]}"
    return DEFAULT_TOKEN_FILE if os.path.isfile(os.path.expanduser(DEFAULT_TOKEN_FILE)) else None


def _enable_token_mode(reason: str) -> None:
    """RAY_AUTH_MODE=token for this process and its children, as `ray start` sets it; undone by disconnect()."""
    try:
        from ray._raylet import AuthenticationTokenLoader, Config
    except ImportError:                       # a Ray before token authentication (2.52): nothing to turn on
        return
    _changed_env.setdefault(AUTH_MODE, os.environ.get(AUTH_MODE))
    os.environ[AUTH_MODE] = "token"
    Config.initialize("")                     # Ray caches its config; re-read the environment
    AuthenticationTokenLoader.instance().reset_cache()
    log.info("nnhal.ray: token authentication on (%s), token from %s", reason, _token_source())


def _auth_failure(where: str) -> ClusterError:
    mode = os.environ.get(AUTH_MODE)
    source = _token_source()
    if mode == "token" and source:
        why = f"it refused the token from {source}: it is not this cluster's token"
    elif mode == "token":
        why = "token authentication is on here but no token was found"
    else:
        why = f"it requires token authentication, which is off in this process ({AUTH_MODE}={mode or 'unset'})"
    return ClusterError(f"the Ray cluster at {where} refused the connection: {why}; {AUTH_HELP}")


def _probe(host: str, port: int) -> None:
    """Fail fast, saying what to check, where ray.init would retry for 20 s and report only 'Failed to connect'."""
    import socket

    try:
        socket.create_connection((host, port), timeout=10).close()
    except OSError as exc:
        raise ClusterError(f"nothing answers at {host}:{port} ({exc.strerror or exc}): check the address, the head "
                           "node's GCS port (`ray start --head --port`, default 6379, printed by ray start as "
                           "`ray start --address='IP:PORT'`); from another machine use the head's IP, not "
                           "127.0.0.1") from exc
    try:
        from ray._raylet import GcsClient
        from ray.exceptions import AuthenticationError
    except ImportError:
        return
    try:
        GcsClient(address=f"{host}:{port}")
    except AuthenticationError as exc:
        raise _auth_failure(f"{host}:{port}") from exc
    except Exception:  # noqa: BLE001 - anything else is for ray.init to report, with its own words
        return


def connect(address: str, **init_kwargs: Any) -> None:
    """Connect this process to the Ray cluster at ``address``: 'auto' (a cluster started on this machine),
    'HOST:PORT' (the head's GCS) or 'ray://HOST:PORT' (Ray Client, needs ``pip install 'ray[client]'``).

    Token authentication follows Ray (RAY_AUTH_MODE, RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token);
    token mode is also turned on when this process names a token (RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH set)
    and for a cluster on this machine with a token in ~/.ray/auth_token, as `ray start` does. Never turns
    authentication off. Raises ClusterError saying what to check: the address, the token, the Ray version.
    ``init_kwargs`` go to ray.init.
    """
    import ray

    client, probe = address.startswith("ray://"), None
    if address != "auto":
        host, port = _split_address(address.removeprefix("ray://"))
        probe = None if client else (host, port)
        if client and importlib.util.find_spec("grpc") is None:
            raise ClusterError(f"'{address}' is a Ray Client address, which needs Ray's client extra: "
                               "pip install 'ray[client]' (or pass the head's HOST:PORT, its GCS port, from a "
                               "machine that reaches every node)")
        if os.environ.get(AUTH_MODE) is None:
            if os.environ.get(AUTH_TOKEN) or os.environ.get(AUTH_TOKEN_PATH):
                _enable_token_mode(f"{AUTH_TOKEN} or {AUTH_TOKEN_PATH} is set")
            elif not client and _token_source() and _is_local_gcs(host, port):
                _enable_token_mode("a cluster on this machine")
    try:
        if probe:
            _probe(*probe)
        try:
            ray.init(address=address, **init_kwargs)
        except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError, its own
            raise _connect_failure(address, exc) from exc
    except ClusterError:
        _restore_env()
        raise


def _connect_failure(address: str, exc: Exception) -> ClusterError:
    import platform

    import ray
    from ray.exceptions import AuthenticationError

    if isinstance(exc, AuthenticationError):
        return _auth_failure(address)
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    version = f"Ray {ray.__version__} on Python {platform.python_version()}"
    if "version mismatch" in text.lower():
        return ClusterError(f"cannot join the Ray cluster at {address}: {line}; this process runs {version}: "
                            "install the cluster's Ray and Python versions here (or run nnhal on a node of it)")
    return ClusterError(f"cannot connect to the Ray cluster at {address}: {line}; check the address (the head's "
                        f"HOST:PORT, `ray status` on the head), the token ({AUTH_HELP}) and that this process "
                        f"runs the cluster's Ray and Python versions (here {version})")


def disconnect() -> None:
    """ray.shutdown(), and RAY_AUTH_MODE back to what it was before connect() changed it."""
    import ray

    ray.shutdown()
    _restore_env()


def _restore_env() -> None:
    for name, value in _changed_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if _changed_env:
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    _changed_env.clear()
