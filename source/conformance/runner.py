"""The conformance runner: the ONNX backend node suite on any registered device.

Each case is classified as
  pass         every output within the tolerance policy, every node run by the device validated,
  fallback     "passed on fallback": the outputs are right but some node ran on the CPU (declined by
               the device, or re-placed after a failure); never counted as the device's pass,
  wrong        an output outside it (the one category that must stay at zero),
  unsupported  an explicit, reasoned rejection at create or placement time,
  error        anything else (a crash of a kernel or of inference).
"""
from __future__ import annotations

import fnmatch
import functools
import time
import warnings
from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np

from nnhal.conformance.results import ERROR, FALLBACK, PASS, UNSUPPORTED, WRONG, CaseResult
from nnhal.conformance.tolerance import compare, kit_policy, quantized_atol
from nnhal.device.manager import FALLBACK_DEVICE
from nnhal.errors import NnhalError, UnsupportedError
from nnhal.options import PRECISIONS


@functools.lru_cache(maxsize=1)
def all_cases() -> tuple:
    """Every node test case of the installed onnx wheel, built once per process (it takes seconds)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tuple(collect_testcases(None))


def collect_cases(ops: list[str] | None = None, pattern: str | None = None) -> list:
    """Node test cases of the installed onnx wheel, filtered by op types or a name glob."""
    cases = all_cases()
    selected = []
    for case in cases:
        if pattern and not fnmatch.fnmatch(case.name, pattern):
            continue
        if ops and not set(ops) & {n.op_type for n in case.model.graph.node}:
            continue
        selected.append(case)
    return selected


def _execute(model, feeds: list[np.ndarray], device: str, precision: str,
             strict: bool = False) -> tuple[list[np.ndarray], dict]:
    """Run one model once through the public API; returns the outputs and node -> (device, op type), where
    each node ran (after any fallback).

    ``strict`` keeps every node on ``device`` (no CPU fallback): a node the device declines is then
    an UnsupportedError, so a case passes only when the device itself computed it."""
    from nnhal.session import Session

    with Session(model, devices=[device], precision=precision, num_thread=1, strict=strict) as session:
        outputs = session.run(list(feeds))
        placement = {name: (d.device, d.op_type) for name, d in session.placement.items()}
    return outputs, placement


def _arrays(values) -> list[np.ndarray] | None:
    """Case data as arrays (numpy scalars and TensorProtos converted); None for sequences and optionals."""
    import onnx
    from onnx import numpy_helper

    from nnhal.errors import UnsupportedTypeError
    from nnhal.graph.dtypes import to_numpy, type_name

    out = []
    for v in values:
        if isinstance(v, np.generic):
            v = np.asarray(v)
        elif isinstance(v, onnx.TensorProto):
            if to_numpy(v.data_type) is None:
                raise UnsupportedTypeError(f"test data of element type {type_name(v.data_type)}")
            v = numpy_helper.to_array(v)
        if not isinstance(v, np.ndarray):
            return None
        out.append(v)
    return out


def _tolerance(precision: str, case, expected: np.ndarray, inputs: list[np.ndarray]):
    """The kit's policy for the case's ops (never the case's own, looser, tolerance); under a quantized
    precision a float output may also be off by tolerance.quantized_atol of the case's inputs and this output."""
    tol = kit_policy(precision, {n.op_type for n in case.model.graph.node}, case.name)
    if precision in ("int8", "uint8") and expected.dtype.kind == "f" and expected.size:
        tol = replace(tol, atol=max(tol.atol, quantized_atol([expected, *inputs])))
    return tol


def weight_inputs(model) -> list[str]:
    """Graph inputs a node reads only as its second or later input (weights, biases, scales, shapes): what a
    deployed model holds as initializers. The first input of a node stays a graph input."""
    first = {n.input[0] for n in model.graph.node if n.input}
    later = {i for n in model.graph.node for i in n.input[1:] if i}
    return [v.name for v in model.graph.input if v.name in later and v.name not in first]


def with_constant_weights(model, inputs: list[np.ndarray]) -> tuple[Any, list[np.ndarray]]:
    """``model`` with its :func:`weight_inputs` made initializers holding ``inputs``' values (graph input
    order), and the inputs that remain graph inputs."""
    from onnx import numpy_helper

    weights = set(weight_inputs(model))
    names = [v.name for v in model.graph.input]
    out = type(model)()
    out.CopyFrom(model)
    del out.graph.input[:]
    kept = []
    for info, name, value in zip(model.graph.input, names, inputs):
        if name in weights:
            out.graph.initializer.append(numpy_helper.from_array(value, name))
        else:
            out.graph.input.append(info)
            kept.append(value)
    return out, kept


def run_case(case, device: str = FALLBACK_DEVICE, precision: str = "fp32", strict: bool = False,
             constant_weights: bool = False) -> CaseResult:
    """One case on ``device`` (the CPU behind it unless ``strict``); ``constant_weights`` makes its weight
    inputs initializers first, as a deployed model has them (a case with none is unsupported so)."""
    ops = sorted({n.op_type for n in case.model.graph.node})
    start = time.perf_counter()
    result = CaseResult(case.name, ops, PASS)
    if constant_weights and not weight_inputs(case.model):
        result.status, result.reason = UNSUPPORTED, "no weight inputs to make constant"
        return result
    try:
        for inputs, expected in case.data_sets:
            inputs, expected = _arrays(inputs), _arrays(expected)
            if inputs is None or expected is None:
                result.status, result.reason = UNSUPPORTED, "sequence or optional values are not supported"
                break
            model = case.model
            if constant_weights:
                model, inputs = with_constant_weights(model, list(inputs))
            with np.errstate(all="ignore"):
                outputs, placement = _execute(model, list(inputs), device, precision, strict)
            result.placement = {name: dev for name, (dev, _) in placement.items()}
            result.fell_back = sorted({op for dev, op in placement.values() if dev != device} | set(result.fell_back))
            for i, (got, want) in enumerate(zip(outputs, expected)):
                why = compare(got, want, _tolerance(precision, case, want, list(inputs)))
                if why:
                    result.status, result.reason = WRONG, f"output {i}: {why}"
                    break
            if result.status != PASS:
                break
        if result.status == PASS and result.fell_back:
            result.status = FALLBACK
            result.reason = f"passed on fallback: {', '.join(result.fell_back)} ran on another device"
    except UnsupportedError as exc:
        result.status, result.reason = UNSUPPORTED, str(exc)
    except NnhalError as exc:
        result.status, result.reason = ERROR, f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # a crash is reported, never hidden
        result.status, result.reason = ERROR, f"{type(exc).__name__}: {exc}"
    result.seconds = time.perf_counter() - start
    return result


def run_suite(device: str = FALLBACK_DEVICE, precision: str = "fp32", ops: list[str] | None = None,
              pattern: str | None = None, progress: bool = True) -> list[CaseResult]:
    """Every selected case on ``device``; ``progress`` counts them on stderr (see nnhal.ui.progress)."""
    from nnhal.ui.progress import Progress

    cases = collect_cases(ops, pattern)
    results: list[CaseResult] = []
    counts: Counter = Counter()
    with Progress(f"validate {device}", len(cases), quiet=not progress) as bar:
        for case in cases:
            results.append(run_case(case, device, precision))
            counts[results[-1].status] += 1
            bar.step(detail=" ".join(f"{s} {counts[s]}" for s in (PASS, FALLBACK, WRONG, UNSUPPORTED, ERROR)))
    return results


def summary(results: list[CaseResult]) -> Counter:
    return Counter(r.status for r in results)


def known_ops() -> list[str]:
    """Op types used by at least one case of the installed onnx wheel."""
    return sorted({n.op_type for case in all_cases() for n in case.model.graph.node})


def check_selection(ops: list[str] | None, pattern: str | None) -> None:
    """OptionsError naming an op no case uses (with the closest known ones), or a pattern matching nothing."""
    import difflib

    from nnhal.errors import OptionsError

    known = known_ops()
    for op in ops or []:
        if op not in known:
            close = difflib.get_close_matches(op, known, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; {len(known)} ops have cases"
            raise OptionsError(f"no conformance case uses op '{op}'{hint}")
    if not collect_cases(ops, pattern):
        raise OptionsError(f"no conformance case matches --pattern '{pattern}'"
                           + (f" among the cases of {','.join(ops)}" if ops else ""))


def print_per_op(results: list[CaseResult], device: str) -> None:
    """The per-op table of the device's own coverage: a pass is an op the device ran in a right case."""
    from nnhal.conformance.report import STATUSES, per_op

    print(f"{'op':28s}" + "".join(f"{s:>12s}" for s in STATUSES) + f"   (pass: run by '{device}' itself)")
    for op, counts in per_op(results).items():
        print(f"{op:28s}" + "".join(f"{counts[s]:12d}" for s in STATUSES))


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m nnhal.conformance")
    parser.add_argument("--device", default=FALLBACK_DEVICE, help="the device to validate (nnhal devices lists them)")
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS,
                        help="precision the cases run at (tolerances follow NNAPI's CTS)")
    parser.add_argument("--ops", default="", help="comma-separated op types (default: every case)")
    parser.add_argument("--pattern", default=None, help="glob on case names, e.g. 'test_conv*'")
    parser.add_argument("--report", default=None, help="write a report: out.json or out.html")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every non-passing case")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    ops = [o for o in args.ops.split(",") if o] or None
    if args.report and not args.report.endswith((".json", ".html", ".htm")):
        parser.error(f"--report '{args.report}': use a .json or .html file name")
    from nnhal import api
    from nnhal.device.manager import find_device

    api.init()
    find_device(args.device)       # an unknown device is a usage error, not N failed cases
    check_selection(ops, args.pattern)
    results = run_suite(args.device, args.precision, ops, args.pattern, progress=not args.quiet)
    for r in results:
        if r.status not in (PASS, FALLBACK) and (args.verbose or r.status in (WRONG, ERROR)):
            print(f"{r.status:12s} {r.name}: {r.reason[:300]}")
    if ops or args.verbose:
        print_per_op(results, args.device)
    if args.report:
        from nnhal.conformance.report import write

        write(results, args.report, args.device, args.precision)
        print(f"report written to {args.report}")
    c = summary(results)
    fallback = f", {c[FALLBACK]} passed on fallback (not the device's)" if c[FALLBACK] else ""
    print(f"{c[PASS]} passed{fallback}, {c[WRONG]} wrong, {c[UNSUPPORTED]} unsupported, {c[ERROR]} error "
          f"of {len(results)}")
    return 1 if c[WRONG] or c[ERROR] else 0
