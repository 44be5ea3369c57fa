"""What every `nnhal` command shares: exit codes, argument types, models, device lists, inputs.

Exit codes (as pytest's):
    0  everything asked for succeeded
    1  the command ran and something it checked failed: a conformance case wrong or in error,
       an accuracy below the asked threshold
    2  the request cannot be carried out as given: a usage error, a missing or unreadable file,
       a bad model, an unknown device or op, a bad option value (every nnhal.NnhalError);
       one line on stderr names the problem, no traceback
    3  an internal error: a bug in nnhal; the traceback is shown, then a line saying so
  130  interrupted (Ctrl-C)
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable

import numpy as np

from nnhal.errors import NnhalError
from nnhal.options import PRECISIONS

OK, FAILED, USAGE, BUG, INTERRUPTED = 0, 1, 2, 3, 130


class UsageError(NnhalError):
    """A command line that cannot be carried out as given (exit code 2)."""


def version() -> str:
    """The installed package's version (the distribution's metadata; the module's when not installed)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("nnhal")
    except PackageNotFoundError:
        import nnhal

        return nnhal.__version__


def error_line(message: str) -> None:
    """One line on stderr (a multi-line message is joined), prefixed as argparse does."""
    print("nnhal: error: " + " ".join(str(message).split()), file=sys.stderr)


def guarded(func: Callable[[], int]) -> int:
    """Run a command, turning what a user can cause into one line and an exit code (see the module doc)."""
    try:
        return func()
    except NnhalError as exc:
        error_line(str(exc))
        return USAGE
    except FileNotFoundError as exc:
        error_line(f"no such file: '{exc.filename}'")
        return USAGE
    except OSError as exc:
        # NOTE: an OSError out of a command is a file the user named (unreadable, a folder, no space)
        error_line(f"cannot use '{exc.filename}': {exc.strerror or exc}" if exc.filename else str(exc))
        return USAGE
    except KeyboardInterrupt:
        print("nnhal: interrupted", file=sys.stderr)
        return INTERRUPTED
    except Exception:  # noqa: BLE001 - anything else is a bug: show it whole, say so
        traceback.print_exc()
        print("nnhal: internal error: this is a bug in nnhal; please report it with the traceback above",
              file=sys.stderr)
        return BUG


# ------------------------------------------------------------------ argument types
def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _int_at_least(text, 1)


def natural_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _int_at_least(text, 0)


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"{value} is below {low}")
    return value


def fraction(text: str) -> float:
    """argparse type: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{value} is not between 0 and 1")
    return value


def precision_list(text: str) -> list[str]:
    """argparse type: comma-separated precisions, each one nnhal knows."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in names if p not in PRECISIONS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown precision(s) {bad}; choose from {', '.join(PRECISIONS)}")
    return names


def output_file(*suffixes: str) -> Callable[[str], str]:
    """argparse type: a file to write, named with one of ``suffixes``, in a folder that exists."""
    def check(text: str) -> str:
        if not text.lower().endswith(suffixes):
            raise argparse.ArgumentTypeError(f"'{text}': use a {' or '.join(suffixes)} file name")
        folder = os.path.dirname(os.path.abspath(text))
        if not os.path.isdir(folder):
            raise argparse.ArgumentTypeError(f"'{text}': the folder '{folder}' does not exist")
        return text
    return check


def add_quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress on stderr (results still go to stdout)")


# ------------------------------------------------------------------ models, devices, inputs
@contextmanager
def held_warnings(drop: Callable[[logging.LogRecord], bool]) -> Iterator[list[logging.LogRecord]]:
    """Hold what the ``nnhal`` logger says inside the block; afterwards show each record once, in order,
    except those ``drop`` names: what the command itself prints (a fallback in its report, the reason
    in its error line) is then not said a second time. The yielded list collects the held records."""
    held: list[logging.LogRecord] = []
    logger = logging.getLogger("nnhal")
    handler = logging.Handler(logging.WARNING)
    handler.emit = held.append
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False
    try:
        yield held
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        shown: set[str] = set()
        for record in held:
            message = record.getMessage()
            if message not in shown and not drop(record):
                shown.add(message)
                logger.handle(record)


def device_list(text: str) -> list[str]:
    """Registered device names, in priority order, from 'a,b'; UsageError naming an unknown one.

    A named device that is unavailable is an error naming the reason; init()'s warning about that
    device is then not shown as well."""
    from nnhal import api
    from nnhal.device.manager import find_device

    names = [d.strip() for d in text.split(",") if d.strip()]
    if not names:
        raise UsageError("--device is empty; give a comma-separated list such as 'vnpu,cpu'")
    missing: set[str] = set()
    with held_warnings(lambda record: bool(record.args) and record.args[0] in missing):
        api.init()
        for name in names:
            try:
                find_device(name)       # DeviceError listing the registered devices and the closest name
            except NnhalError:
                missing.add(name)
                raise
    return names


def load_model(spec: str) -> tuple[Any, Any]:
    """(what Session takes, the onnx.ModelProto) for a path or 'zoo:<name>[?weights=random&seed=N]'."""
    import onnx

    from nnhal.errors import ModelError
    from nnhal.zoo import resolve

    if not spec.startswith("zoo:"):
        if not os.path.exists(spec):
            raise UsageError(f"model file '{spec}' does not exist")
        if not os.path.isfile(spec):
            raise UsageError(f"model '{spec}' is not a file")
    model = resolve(spec)
    if isinstance(model, onnx.ModelProto):
        return model, model
    try:
        return model, onnx.load(model, load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf's parse errors have no common base
        raise ModelError(f"cannot read ONNX model from '{spec}': {exc}") from exc


def parse_inputs(specs: list[str]) -> dict[str, np.ndarray]:
    """name=file.npy pairs as arrays."""
    feeds = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise UsageError(f"--input takes name=file.npy, got '{spec}'")
        try:
            value = np.load(path)      # NOTE: allow_pickle stays False: an input file is untrusted
        except (ValueError, EOFError) as exc:
            raise UsageError(f"--input {spec}: '{path}' is not a .npy file holding an array") from exc
        if not isinstance(value, np.ndarray):
            value.close()
            raise UsageError(f"--input {spec}: '{path}' is an .npz archive; give one .npy array per input")
        feeds[name] = value
    return feeds
