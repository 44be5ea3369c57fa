"""Progress on stderr: a redrawn line on a terminal, a few plain lines otherwise, nothing with --quiet."""
from __future__ import annotations

import io

from nnhal.cli.main import main
from nnhal.cli.progress import Progress
from tests.cli.models import conv_softmax, save


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_a_line_per_tenth():
    stream = io.StringIO()
    with Progress("work", 1000, stream=stream) as bar:
        for _ in range(1000):
            bar.step()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10
    assert "\r" not in stream.getvalue()
    assert lines[0].startswith("work [###") and " 100/1000 " in lines[0]
    assert " 1000/1000 " in lines[-1]


def test_on_a_terminal_one_redrawn_line_ended_at_close():
    stream = Terminal()
    with Progress("work", 50, stream=stream) as bar:
        for _ in range(50):
            bar.step(detail="busy")
    text = stream.getvalue()
    assert text.startswith("\r") and text.endswith("\n") and text.count("\n") == 1
    assert "50/50" in text.rsplit("\r", 1)[-1] and "busy" in text


def test_quiet_writes_nothing():
    for stream in (io.StringIO(), Terminal()):
        with Progress("work", 10, quiet=True, stream=stream) as bar:
            for _ in range(10):
                bar.step()
        assert stream.getvalue() == ""


def test_run_repeat_reports_progress_on_stderr_and_results_on_stdout(capsys, tmp_path):
    model = save(conv_softmax(), tmp_path)
    assert main(["run", model, "--repeat", "3"]) == 0
    out = capsys.readouterr()
    assert "latency over 3 runs" in out.out and "run [" not in out.out
    assert [line.split()[2] for line in out.err.splitlines()] == ["1/4", "2/4", "3/4", "4/4"]
    assert main(["run", model, "--repeat", "3", "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_validate_counts_cases_on_stderr(capsys):
    assert main(["validate", "--ops", "Relu"]) == 0
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("validate cpu [###") and "pass" in err
    assert main(["validate", "--ops", "Relu", "-q"]) == 0
    assert capsys.readouterr().err == ""


def test_a_real_terminal_gets_the_redrawn_line(tmp_path):
    """`nnhal run` with stderr on a pseudo-terminal: one line redrawn with carriage returns."""
    import os
    import pty
    import subprocess
    import sys

    model = save(conv_softmax(), tmp_path)
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "nnhal.cli.main", "run", model, "--repeat", "3"],
                              stdout=subprocess.PIPE, stderr=follower, timeout=300)
        os.close(follower)
        err = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:              # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            err += chunk
    finally:
        os.close(leader)
    assert proc.returncode == 0
    err = err.replace(b"\r\n", b"\n")          # the terminal's own newline translation
    assert err.startswith(b"\rrun [") and b"4/4" in err.rsplit(b"\r", 1)[-1]
    assert err.count(b"\n") == 1 and b"latency over 3 runs" in proc.stdout
