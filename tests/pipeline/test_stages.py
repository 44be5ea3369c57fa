"""The prepare pipeline: each stage is a module of source/pipeline/ named as the stage, they run in the
order of docs/architecture.md, each is timed, and `nnhal placement` / `nnhal profile` show them."""
from __future__ import annotations

from pathlib import Path

import numpy as np

import nnhal
from nnhal.cli.main import main
from tests.cli.models import conv_softmax, save

PIPELINE = Path(__file__).resolve().parents[2] / "source" / "pipeline"
STAGES = ["import_model", "inference_and_folding", "passes", "precision_plan", "placement", "split",
          "calibration", "optimize", "allocate_and_prerun"]
X = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)


def test_every_stage_is_a_module_named_after_it():
    assert all((PIPELINE / f"{stage}.py").is_file() for stage in STAGES)


def test_a_prerun_runs_the_stages_in_order_and_times_each():
    with nnhal.Session(conv_softmax(), devices=["vnpu", "cpu"], precision="uint8") as s:
        s.run({"x": X})
        stages = s.report().stages
        times = s.graph.stage_times
    assert [name for name, _ in stages] == STAGES
    assert [t.stage for t in times] == STAGES and all(t.seconds >= 0 for t in times)


def test_explain_runs_the_stages_up_to_split():
    report = nnhal.explain(conv_softmax(), devices=["vnpu", "cpu"], precision="uint8")
    assert [name for name, _ in report.stages] == STAGES[:STAGES.index("split") + 1]


def test_a_new_input_shape_prepares_again_without_importing_again():
    model = conv_softmax()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    with nnhal.Session(model) as s:
        s.run({"x": X})
        s.run({"x": np.concatenate([X, X])})
        names = [t.stage for t in s.graph.stage_times]
    assert names == STAGES        # import_model once, from create_graph; the other stages of the last prerun


def test_the_cli_shows_the_stages(capsys, tmp_path):
    model = save(conv_softmax(), tmp_path)
    assert main(["placement", model, "--device", "vnpu,cpu", "--precision", "uint8", "--run"]) == 0
    out = capsys.readouterr().out
    assert "prepare stages" in out and all(f"\n  {stage} " in out for stage in STAGES)
    assert main(["profile", model, "--runs", "2", "--warmup", "0"]) == 0
    out = capsys.readouterr().out
    assert "prepare stages" in out and all(f"\n  {stage} " in out for stage in STAGES)
