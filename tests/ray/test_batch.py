"""nnhal batch on the local 2-CPU Ray cluster: images, parquet, resume, a bad row, --on-error fail, a killed actor."""
from __future__ import annotations

import os

import numpy as np
import pytest

from nnhal.batch import JobSpec, PartRunner, run_job
from nnhal.cli.main import main
from tests.ray.conftest import loop


def _read(output) -> dict[str, list]:
    import pyarrow.parquet as pq

    return pq.read_table(output).to_pydict()


@pytest.fixture
def image_folder(tmp_path, digits):
    pil = pytest.importorskip("PIL.Image", reason="Pillow reads image inputs (pip install 'nnhal[ray]')")
    folder = tmp_path / "images"
    folder.mkdir()
    pixels = np.round(digits[:20, 0] * 255).astype(np.uint8)
    for i, image in enumerate(pixels):
        pil.fromarray(image).save(folder / f"{i:03d}.png")
    (folder / "010b.png").write_bytes(b"not a png at all")
    return folder, pixels[:, None].astype(np.float32) / 255.0


def test_images_skip_a_bad_file_and_resume(ray_local, digits_model, image_folder, tmp_path, capsys):
    folder, rows = image_folder
    out = tmp_path / "out"
    argv = ["batch", digits_model, str(folder), str(out), "--rows-per-part", "6", "--batch-size", "1"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "4 part(s): 0 complete before (skipped), 4 written; 21 row(s)" in printed
    assert "010b.png: cannot decode image" in printed
    table = _read(out)
    keys = [f"{i:03d}.png" for i in range(11)] + ["010b.png"] + [f"{i:03d}.png" for i in range(11, 20)]
    assert table["key"] == keys
    bad = keys.index("010b.png")
    assert table["logits"][bad] is None and "cannot decode image" in table["error"][bad]
    good = [i for i in range(len(keys)) if i != bad]
    np.testing.assert_array_equal(np.array([table["logits"][i] for i in good]), loop(digits_model, rows))

    kept = {p.name: p.stat().st_mtime_ns for p in out.glob("part-*.parquet") if p.name != "part-00002.parquet"}
    (out / "part-00002.parquet").unlink()
    assert main(argv) == 0
    assert "4 part(s): 3 complete before (skipped), 1 written; 6 row(s)" in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("part-*.parquet") if p.name in kept} == kept
    assert _read(out) == table

    assert main(argv[:-2] + ["--batch-size", "2"]) == 2       # another job into the same folder is refused
    assert "differs in batch_size" in capsys.readouterr().err


def test_on_error_fail_stops_and_names_the_row(ray_local, digits_model, image_folder, tmp_path, capsys):
    folder, _ = image_folder
    out = tmp_path / "out"
    assert main(["batch", digits_model, str(folder), str(out), "--rows-per-part", "30", "--on-error", "fail"]) == 2
    err = capsys.readouterr().err
    assert "010b.png: cannot decode image" in err and "run again to resume" in err
    assert not list(out.glob("part-*")) and not list(out.glob(".part-*"))


def test_parquet_with_a_key_column_and_a_malformed_row(ray_local, digits_model, digits, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    flat = [row.reshape(-1).tolist() for row in digits[:15]]
    flat[4] = flat[4][:63]
    pq.write_table(pa.table({"name": [f"s{i}" for i in range(15)], "input": flat}), tmp_path / "in.parquet")
    out = tmp_path / "out"
    assert main(["batch", digits_model, str(tmp_path / "in.parquet"), str(out), "--key", "name",
                 "--rows-per-part", "4"]) == 0
    assert "s4: input 'input' (column 'input') expects rows of shape [1x8x8], got [63]" in capsys.readouterr().out
    table = _read(out)
    assert table["key"] == [f"s{i}" for i in range(15)]
    good = [i for i in range(15) if i != 4]
    assert [e is None for e in table["error"]] == [i != 4 for i in range(15)]
    np.testing.assert_allclose(np.array([table["logits"][i] for i in good]), loop(digits_model, digits[good]),
                               rtol=1e-5, atol=1e-5)


class DyingRunner(PartRunner):
    """Kills its actor right after writing part 1 the first time (a marker file remembers it)."""

    def run_part(self, part):
        failed = super().run_part(part)
        marker = self.output.parent / "killed"
        if part.index == 1 and not marker.exists():
            marker.touch()
            os._exit(1)
        return failed


def test_a_killed_actor_leaves_every_row_once(ray_local, digits_model, digits, tmp_path):
    np.savez(tmp_path / "rows.npz", input=digits[:24])
    job = JobSpec(model=digits_model, kind="npz", batch_size=1)
    report = run_job(job, str(tmp_path / "rows.npz"), str(tmp_path / "out"), rows_per_part=4, runner=DyingRunner)
    assert (tmp_path / "killed").exists()
    assert (report.parts, report.written, report.rows, report.failed) == (6, 6, 24, [])
    node = ray_local.get_runtime_context().get_node_id()
    assert report.nodes == {node: 6} and report.lost == {node: 1}     # part 1 ran twice, on the one node
    table = _read(tmp_path / "out")
    assert table["key"] == [f"rows.npz[{i}]" for i in range(24)]
    np.testing.assert_array_equal(np.array(table["logits"]), loop(digits_model, digits[:24]))


def test_the_command_starts_its_own_local_cluster(digits_model, digits, tmp_path):
    """As on a fresh machine: no cluster running in this process; `nnhal batch` starts one and stops it.
    A device other than the CPU is a custom resource that the local cluster offers when it is registered."""
    pytest.importorskip("ray.data", reason="Ray Data is not installed (pip install 'nnhal[ray]')")
    import subprocess
    import sys

    np.savez(tmp_path / "rows.npz", digits[:10])                     # one array, not named like the input
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "nnhal.cli.main", "batch", digits_model, str(tmp_path / "rows.npz"),
                           str(out), "--device", "vnpu,cpu", "--num-cpus", "2", "--rows-per-part", "4"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "3 part(s): 0 complete before (skipped), 3 written; 10 row(s)" in done.stdout
    np.testing.assert_allclose(np.array(_read(out)["logits"]), loop(digits_model, digits[:10]), rtol=1e-5, atol=1e-5)
