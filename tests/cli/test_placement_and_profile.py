"""`nnhal placement` / Session.report(): boundary conversions and the real placement after a fallback;
a printable Session.placement; Session("zoo:..."); `nnhal profile` shares that sum to 100%."""
from __future__ import annotations

import re

import numpy as np
import pytest

import nnhal
from nnhal.cli.main import main
from nnhal.device.device import Allocator, Description, Device, Interface
from nnhal.device.manager import register_device, unregister_device
from tests.cli.models import conv_softmax, save

X = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)


def failing_device() -> Device:
    """Takes Relu, fails at run: the scheduler re-places its subgraph on the CPU."""
    def run(device, sg):
        raise RuntimeError("injected run fault")

    return Device("failing", Interface(run=run),
                  Allocator(describe=lambda d: Description(frozenset({"Relu"}), ("fp32",))))


@pytest.fixture
def failing():
    register_device(failing_device())
    yield "failing"
    unregister_device("failing")


def test_session_placement_prints_a_table_and_is_a_dict():
    with nnhal.Session(conv_softmax(), devices=["vnpu", "cpu"], precision="uint8") as s:
        s.run({"x": X})
        placement = s.placement
        text = str(placement)
    assert text.splitlines()[0] == "placement of 5 nodes: vnpu 3, cpu 2"
    assert text.splitlines()[1].split() == ["node", "op", "device", "reason"]
    rows = {line.split()[0]: line.split() for line in text.splitlines()[2:]}
    assert rows["conv"][:3] == ["conv", "Conv", "vnpu"] and rows["softmax"][:3] == ["softmax", "Softmax", "cpu"]
    assert "declined by vnpu: does not support op Softmax" in text
    assert placement["conv"].device == "vnpu" and list(placement) == ["conv", "relu", "pool", "flatten", "softmax"]
    assert {k: d.device for k, d in dict(placement).items()}["flatten"] == "cpu"
    assert repr(placement).startswith("<Placement of 5 nodes: {'vnpu': 3, 'cpu': 2}>")


def test_placement_and_report_show_where_nodes_ran_after_a_fallback(failing):
    model = conv_softmax()
    with nnhal.Session(model, devices=[failing, "cpu"]) as s:
        before = s.placement          # before the first run: the plan
        s.run({"x": X})
        after = s.placement
        report = str(s.report())
    assert len(before) == 0 and "none yet" in str(before)
    assert after["relu"].device == "cpu"
    assert after["relu"].reason.startswith("fell back from failing (failed at run: RuntimeError: injected run fault")
    assert "failing" in after["relu"].declined
    row = next(line for line in report.splitlines() if line.startswith("relu "))
    assert row.split()[:3] == ["relu", "Relu", "cpu"] and "fell back from failing" in row
    assert "fallback: subgraph #1" in report and "re-placed on cpu" in report
    assert report.splitlines()[0] == "placement of 5 nodes: cpu 5"


def test_cli_placement_run_shows_conversions_formats_and_bytes(capsys, tmp_path):
    model = save(conv_softmax(), tmp_path)
    assert main(["placement", model, "--device", "vnpu,cpu", "--precision", "uint8", "--run"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("boundary tensor(s)"):].split("\n\n")[0].splitlines()   # the table ends at a blank line
    assert table[1].split() == ["tensor", "from", "to", "format", "conversion", "transfer", "bytes"]
    rows = {line.split()[0]: line for line in table[2:]}
    assert re.search(r"graph input\s+subgraph #0 \(vnpu\)\s+float32\[1x3x8x8\]\s+to uint8\(scale=", rows["x"])
    # the vnpu has memory of its own (copies in and out); the cpu's is the host's
    assert re.search(r"\s+convert; copy in\s+768$", rows["x"])
    assert re.search(r"subgraph #0 \(vnpu\)\s+subgraph #1 \(cpu\)\s+float32\[1x6x1x1\]\s+"
                     r"from uint8\(.*\) to host\s+copy out; convert\s+24$", rows["g"])


def test_cli_placement_without_run_explains_the_plan(capsys, tmp_path):
    assert main(["placement", save(conv_softmax(), tmp_path), "--device", "vnpu,cpu", "--precision", "uint8"]) == 0
    out = capsys.readouterr().out
    assert "declined by vnpu: does not support op Flatten" in out and "3 boundary tensor(s)" in out


def test_session_takes_a_zoo_name_as_the_cli_does():
    import onnx

    from nnhal.zoo import resolve

    with nnhal.Session("zoo:squeezenet?weights=random&seed=3") as s:
        got = {n: t.value for n, t in s.graph.graph.tensors.items() if t.value is not None and t.value.ndim == 4}
        assert s.input_names == ["data_0"] and s.output_names == ["softmaxout_1"]
    inits = resolve("zoo:squeezenet?weights=random&seed=3").graph.initializer
    want = {i.name: onnx.numpy_helper.to_array(i) for i in inits}
    name = next(iter(sorted(set(got) & set(want))))
    np.testing.assert_array_equal(got[name], want[name])
    with pytest.raises(nnhal.ModelError, match="no zoo model 'nosuchnet'"):
        nnhal.Session("zoo:nosuchnet")


def test_profile_shares_account_for_every_device_and_the_framework():
    with nnhal.Session(conv_softmax(), devices=["vnpu", "cpu"], precision="uint8") as s:
        prof = s.profile({"x": X}, runs=3)
    shares = prof.shares()
    assert sum(r.share for r in shares) == pytest.approx(1.0, abs=1e-9)
    assert sum(r.ms for r in shares) == pytest.approx(prof.accounted_ms, rel=1e-9)
    kinds = {(r.kind, r.device) for r in shares}
    assert ("subgraph", "vnpu") in kinds            # a device that does not time its nodes: as a whole
    assert ("op", "cpu") in kinds and ("framework", "-") in kinds
    assert shares[-1].kind == "framework" and shares[-1].ms >= 0


def test_cli_profile_table_shares_sum_to_100_percent(capsys, tmp_path):
    html = tmp_path / "profile.html"
    assert main(["profile", save(conv_softmax(), tmp_path), "--device", "vnpu,cpu", "--precision", "uint8",
                 "--runs", "2", "--html", str(html)]) == 0
    out = capsys.readouterr().out
    section = out[out.index("by op and kernel"):out.index("slowest")].strip().splitlines()[2:]
    percents = [float(line.split()[-1].rstrip("%")) for line in section]
    assert sum(percents) == pytest.approx(100.0, abs=0.1 * len(percents))
    assert any(line.startswith("vnpu ") for line in section) and section[-1].startswith("-  ")
    sub = out[out.index(" subgraph  device"):out.index("by op")].strip().splitlines()[1:]
    assert sum(float(line.split()[-1].rstrip("%")) for line in sub) == pytest.approx(100.0, abs=0.1 * len(sub))
    assert sub[-1].split()[0] == "framework"
    page = html.read_text()
    assert 'id="shares"' in page and "<svg" in page


def test_cli_placement_run_shows_the_fallback(capsys, tmp_path, failing):
    assert main(["placement", save(conv_softmax(), tmp_path), "--device", f"{failing},cpu", "--run"]) == 0
    out = capsys.readouterr().out
    relu = next(line for line in out.splitlines() if line.startswith("relu "))
    assert relu.split()[2] == "cpu" and "fell back from failing (failed at run" in relu
    assert "subgraph #1 (1 nodes) failed on 'failing' at run" in out
