"""The fuzz driver: cases run in a worker process, each bounded in time; a hang or a crash of the
worker is recorded against its case and a new worker goes on with the next case.

    python -m tests.fuzz.run [START STOP] [-v]      # from the repository root; -v lists every untyped error

A case ``i`` is fully determined by (SEED, i): the base model, the mutation, the precision, the
devices and the inputs. Each goes through nnhal's public C-style API: create_graph, inputs made
from the graph's declared (or guessed) shapes, prerun_graph, run_graph, get_graph_output,
destroy_graph. Its status is ``ok``, ``typed`` (an NnhalError), ``untyped`` (any other exception),
``hang`` (no answer within the case's time bound) or ``crash`` (the worker died); ``wrapped`` is
an NnhalError raised from a numpy or Python exception by a safety net (a gap to fix at its source).
"""
from __future__ import annotations

import json
import os
import random
import resource
import selectors
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

SEED = 20261125
CASE_SECONDS = 20.0          # per-case bound; a case takes milliseconds
STARTUP_SECONDS = 120.0      # a worker builds the corpus before its first case
ADDRESS_SPACE = 4 << 30      # the worker's RLIMIT_AS: a runaway allocation is a MemoryError, not the OOM killer
MAX_INPUT_ELEMENTS = 1 << 20
OWN_MODELS = 4               # digits_cnn, bert and the two zoo models lead the corpus
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Result:
    index: int
    status: str
    model: str = ""
    mutation: str = ""
    detail: str = ""
    seconds: float = 0.0


# ---------------------------------------------------------------------------- worker side
def _inputs(g, rng) -> dict:
    import numpy as np

    feeds = {}
    for name in g.graph.inputs:
        t = g.graph.tensors[name]
        dtype = t.dtype if t.dtype is not None else np.dtype(np.float32)
        shape = tuple(rng.randint(1, 3) if d is None else d for d in (t.shape or ()))
        if any(d < 0 for d in shape) or int(np.prod(shape, dtype=object)) > MAX_INPUT_ELEMENTS:
            continue        # the harness cannot make it; run_graph then reports the input missing
        gen = np.random.default_rng(rng.randrange(2 ** 32))
        if dtype.kind == "f":
            value = gen.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            value = gen.integers(0, 3, shape).astype(dtype)
        elif dtype.kind == "b":
            value = gen.integers(0, 2, shape).astype(bool)
        else:
            value = np.full(shape, "a", dtype=object)
        feeds[name] = value
    return feeds


def _untyped_cause(exc: BaseException) -> BaseException | None:
    """The first non-nnhal exception an nnhal error was raised from (a safety net caught it), if any."""
    import nnhal

    seen = exc.__cause__ or exc.__context__
    while seen is not None:
        if not isinstance(seen, nnhal.NnhalError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _deliberate(cause: BaseException) -> bool:
    """A cause nnhal raised on purpose (a ``raise`` in its own checks, converted by the caller),
    or a protobuf decoding error of garbled bytes; not a gap where numpy or Python failed first."""
    if type(cause).__name__ == "DecodeError":
        return True
    frames = traceback.extract_tb(cause.__traceback__)
    return bool(frames) and "/nnhal/" in frames[-1].filename and (frames[-1].line or "").startswith("raise ")


def case(index: int, corpus: list[tuple[str, bytes]]) -> Result:
    """Run case ``index`` in this process."""
    import nnhal
    from tests.fuzz.mutate import mutate

    start = time.perf_counter()
    rng = random.Random(SEED * 1_000_003 + index)
    # NOTE: one case in ten mutates one of the first (own and zoo) models, the rest any of the corpus
    own = rng.random() < 0.1
    name, data = corpus[rng.randrange(OWN_MODELS if own else len(corpus))]
    model, what = mutate(data, rng)
    precision = rng.choice(["fp32"] * 6 + ["fp16", "int8", "uint8"])
    devices = rng.choice([["cpu"]] * 3 + [["vnpu", "cpu"]])
    g = None
    try:
        ctx = nnhal.create_context("fuzz", devices=devices)
        g = nnhal.create_graph(ctx, "onnx", model)
        for key, value in _inputs(g, rng).items():
            nnhal.set_graph_input(g, key, value)
        nnhal.prerun_graph(g, nnhal.Options(num_thread=1, precision=precision, max_fold_bytes=1 << 24,
                                            max_graph_bytes=1 << 28))
        nnhal.run_graph(g)
        for i in range(len(g.output_names)):
            nnhal.get_graph_output(g, i)
        status, detail = "ok", ""
    except nnhal.NnhalError as exc:
        status, detail = "typed", f"{type(exc).__name__}: {str(exc)[:300]}"
        cause = _untyped_cause(exc)
        frames = traceback.extract_tb(exc.__traceback__)
        # NOTE: a prototype's own error raised over a kernel failure (the CPU plan asks the prototype about
        # operands known only at run time) is a finding fixed at its source, not a safety net
        explained = bool(frames) and "/nnhal/operator/" in frames[-1].filename
        if cause is not None and not _deliberate(cause) and not explained:
            status = "wrapped"
            detail += "\n  wraps " + "".join(traceback.format_exception(cause)[-4:])
    except Exception as exc:
        status, detail = "untyped", "".join(traceback.format_exception(exc)[-6:])
    finally:
        if g is not None and g.state is not nnhal.api.GraphState.DESTROYED:
            try:
                nnhal.destroy_graph(g)
            except nnhal.NnhalError:
                pass
            except Exception as exc:
                status, detail = "untyped", "destroy_graph: " + "".join(traceback.format_exception(exc)[-6:])
    return Result(index, status, name, f"{what} [{precision} on {','.join(devices)}]", detail,
                  time.perf_counter() - start)


def worker(start: int, stop: int) -> None:
    """Run cases start..stop-1, one JSON line each on stdout."""
    import warnings

    import numpy as np

    import nnhal
    from tests.fuzz.corpus import base_models

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    nnhal.init()
    corpus = base_models()
    print(json.dumps({"ready": len(corpus)}), flush=True)
    for index in range(start, stop):
        print(json.dumps(case(index, corpus).__dict__), flush=True)


# ---------------------------------------------------------------------------- driver side
def run_cases(start: int, stop: int, case_seconds: float = CASE_SECONDS) -> list[Result]:
    """Every case's result; hangs and crashes are bounded by killing the worker and restarting after."""
    results: list[Result] = []
    index = start
    while index < stop:
        results.extend(_one_worker(index, stop, case_seconds))
        index = results[-1].index + 1 if results else stop
    return results


def _one_worker(start: int, stop: int, case_seconds: float) -> list[Result]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "tests.fuzz.run", "--worker", str(start), str(stop)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, start_new_session=True)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    out: list[Result] = []
    expected = start
    timeout = STARTUP_SECONDS
    try:
        while expected < stop:
            if not sel.select(timeout):
                out.append(Result(expected, "hang", detail=f"no answer in {timeout:.0f} s"))
                return out
            line = proc.stdout.readline()
            if not line:
                code = proc.wait()
                out.append(Result(expected, "crash", detail=f"worker exited with {code}"))
                return out
            record = json.loads(line)
            timeout = case_seconds
            if "ready" in record:
                continue
            out.append(Result(**record))
            expected = record["index"] + 1
        return out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
        proc.wait()
        proc.stdout.close()


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        worker(int(argv[1]), int(argv[2]))
        return 0
    verbose = "-v" in argv
    args = [a for a in argv if a != "-v"]
    start, stop = (int(args[0]), int(args[1])) if len(args) >= 2 else (0, 2000)
    t0 = time.perf_counter()
    results = run_cases(start, stop)
    wall = time.perf_counter() - t0
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
        if r.status not in ("ok", "typed", "wrapped") or (verbose and r.status == "wrapped"):
            print(f"--- case {r.index} {r.status}: {r.model}: {r.mutation}\n{r.detail}")
    slowest = sorted(results, key=lambda r: -r.seconds)[:5]
    print("slowest: " + ", ".join(f"#{r.index} {r.model} {r.seconds:.2f} s" for r in slowest))
    print(f"{len(results)} cases in {wall:.1f} s: {counts}")
    return 0 if all(r.status in ("ok", "typed", "wrapped") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
