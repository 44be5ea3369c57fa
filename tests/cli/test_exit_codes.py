"""`nnhal` exit codes, --version, help on every option, and one clear line for a user's mistake."""
from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import version

import numpy as np
import pytest

import nnhal
from nnhal.cli.main import build_parser, main
from nnhal.device.device import Allocator, Description, Device, Interface
from nnhal.device.manager import register_device, unregister_device
from nnhal.ui.command import BUG, FAILED, OK, USAGE, guarded
from tests.cli.models import conv_softmax, save


def nnhal_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nnhal.cli.main", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    return save(conv_softmax(), tmp_path_factory.mktemp("cli"))


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    """main() in this process: (exit code, stdout, stderr); argparse's exits become codes."""
    try:
        rc = main(list(args))
    except SystemExit as exc:
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_version_is_the_installed_package_version():
    out = nnhal_cli("--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"nnhal {version('nnhal')}"


def _subcommand_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_every_option_of_every_subcommand_has_help():
    from nnhal.benchmark.run import build_parser as bench_parser

    parser = build_parser()
    commands = _subcommand_parsers(parser)
    assert {"devices", "run", "profile", "placement", "registry", "validate", "accuracy", "bench"} <= set(commands)
    commands["bench"] = bench_parser()          # `nnhal bench` hands its line to the benchmark's parser
    missing = [f"nnhal {name} {action.dest}" for name, sub in [("", parser), *commands.items()]
               for action in sub._actions
               if not isinstance(action, argparse._SubParsersAction)
               and (not action.help or action.help == argparse.SUPPRESS)]
    assert not missing, f"options without help text: {missing}"


@pytest.mark.parametrize("args, message", [
    (["run", "no/such/model.onnx"], "model file 'no/such/model.onnx' does not exist"),
    (["run", "zoo:nosuchnet"], "no zoo model 'nosuchnet'"),
    (["run", "{model}", "--device", "vnpux"], "no device named 'vnpux' is registered"),
    (["run", "{model}", "--input", "x"], "--input takes name=file.npy, got 'x'"),
    (["run", "{model}", "--input", "x=/no/such.npy"], "no such file: '/no/such.npy'"),
    (["run", "{model}", "--input", "nosuch={npy}"], "the graph has no input named 'nosuch'"),
    (["run", "{model}", "--input", "x={model}"], "is not a .npy file holding an array"),
    (["run", "{folder}"], "is not a file"),
    (["placement", "{garbage}"], "cannot read ONNX model"),
    (["validate", "--ops", "Reluu"], "no conformance case uses op 'Reluu'; did you mean Relu"),
    (["validate", "--device", "nosuch", "--ops", "Relu"], "no device named 'nosuch'"),
    (["accuracy", "{model}", "--precision", "fp16,fp64"], "unknown precision(s) ['fp64']"),
    (["accuracy", "{model}", "--data", "{npy}"], "is a single .npy array; give an .npz archive"),
])
def test_a_users_mistake_is_one_line_and_exit_2(capsys, tmp_path, model_file, args, message):
    (tmp_path / "garbage.onnx").write_bytes(b"not a model")
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 8, 8), np.float32))
    args = [a.format(model=model_file, garbage=tmp_path / "garbage.onnx", npy=tmp_path / "x.npy", folder=tmp_path)
            for a in args]
    rc, _, err = run_main(capsys, *args)
    assert rc == USAGE
    assert message in err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if not line.startswith(("usage:", " "))]
    assert len(lines) == 1 and lines[0].startswith("nnhal"), err


@pytest.mark.parametrize("args", [["run", "{model}", "--repeat", "-1"], ["run", "{model}", "--precision", "fp64"],
                                  ["profile", "{model}", "--runs", "0"], ["validate", "--report", "out.txt"],
                                  ["run", "{model}", "--num-thread", "two"], ["nosuchcommand"]])
def test_bad_option_values_are_usage_errors(capsys, model_file, args):
    rc, _, err = run_main(capsys, *[a.format(model=model_file) for a in args])
    assert rc == USAGE
    assert "error:" in err and "Traceback" not in err


def test_no_traceback_from_the_real_command_line(tmp_path):
    out = nnhal_cli("profile", str(tmp_path / "missing.onnx"))
    assert out.returncode == USAGE
    assert out.stderr.strip() == f"nnhal: error: model file '{tmp_path / 'missing.onnx'}' does not exist"


def test_success_is_zero(capsys, model_file):
    rc, out, _ = run_main(capsys, "run", model_file, "--repeat", "1", "--quiet")
    assert rc == OK
    assert "output y: float32[1, 6]" in out


def off_by_one_device() -> Device:
    """A Relu device that adds 1: every Relu conformance case it takes is wrong."""
    def run(device, sg):
        for node in sg.nodes:
            sg.values[node.outputs[0]] = np.maximum(sg.values[node.inputs[0]], 0) + 1

    return Device("offbyone", Interface(run=run),
                  Allocator(describe=lambda d: Description(frozenset({"Relu"}), ("fp32",))))


def test_validate_exits_1_when_a_case_is_wrong(capsys):
    register_device(off_by_one_device())
    try:
        rc, out, _ = run_main(capsys, "validate", "--device", "offbyone", "--pattern", "test_relu", "--quiet")
    finally:
        unregister_device("offbyone")
    assert rc == FAILED
    assert "1 wrong" in out or "wrong" in out.splitlines()[-1]
    rc, out, _ = run_main(capsys, "validate", "--device", "cpu", "--pattern", "test_relu", "--quiet")
    assert rc == OK and out.splitlines()[-1].startswith("1 passed, 0 wrong")


def test_accuracy_below_the_threshold_exits_1(capsys, model_file):
    rc, out, err = run_main(capsys, "accuracy", model_file, "--precision", "uint8", "--min-cosine", "1", "--quiet")
    assert rc == FAILED, out + err
    assert "uint8 cosine" in err and "below --min-cosine 1" in err
    rc, _, err = run_main(capsys, "accuracy", model_file, "--precision", "uint8", "--min-top1", "0", "--quiet")
    assert rc == OK, err


def test_an_internal_error_shows_its_traceback_and_says_it_is_a_bug(capsys):
    def broken() -> int:
        return {}["no such key"]

    assert guarded(broken) == BUG
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError" in err
    assert err.strip().splitlines()[-1].startswith("nnhal: internal error: this is a bug in nnhal")


def test_nnhal_errors_and_files_are_user_errors(capsys):
    def bad_model() -> int:
        raise nnhal.ModelError("the model is\nbroken")

    assert guarded(bad_model) == USAGE
    assert capsys.readouterr().err == "nnhal: error: the model is broken\n"
