"""nnhal batch over a folder with a corrupt file of each kind (npz, image, parquet) and rows that fail inside
the model: with --on-error skip every good row is written once and each bad one is in the output and the
summary with its error; with --on-error fail the job stops, naming the file."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from nnhal.cli.main import main

TABLE = np.arange(11, dtype=np.float32) * 3 + 1
STD = 0.05          # image pixels p / 255 / STD: 0..20; above 10 the Gather index is out of range


@pytest.fixture(scope="module")
def gather_model(tmp_path_factory) -> str:
    """y = TABLE[int(x)] elementwise on rows [1, 8, 8]: exact, and an index above 10 fails inside the run."""
    graph = helper.make_graph(
        [helper.make_node("Cast", ["input"], ["i"], to=TensorProto.INT64),
         helper.make_node("Gather", ["table", "i"], ["y"], axis=0)], "g",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 1, 8, 8])],
        [numpy_helper.from_array(TABLE, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("model") / "gather.onnx"
    onnx.save(model, str(path))
    return str(path)


def _rows(seed: int, count: int, bad: int | None = None) -> np.ndarray:
    rows = np.random.default_rng(seed).integers(0, 11, (count, 1, 8, 8)).astype(np.float32)
    if bad is not None:
        rows[bad, 0, 3, 3] = 50.0                     # Gather index 50 of 11: the run fails for this row
    return rows


def _folder(tmp_path, kind: str) -> tuple[object, dict[str, np.ndarray | None], dict[str, str]]:
    """A folder of ``kind`` files: (folder, {key: input row or None}, {key: what its error says})."""
    folder = tmp_path / kind
    folder.mkdir()
    rows: dict[str, np.ndarray | None] = {}
    bad: dict[str, str] = {}
    if kind == "image":
        pil = pytest.importorskip("PIL.Image", reason="Pillow reads image inputs (pip install 'nnhal[ray]')")
        for i in range(7):
            pixels = np.random.default_rng(i).choice(np.array([0, 60, 120], np.uint8), (8, 8))
            if i == 4:
                pixels[2, 2] = 255                    # 255 / 255 / STD = 20: out of range inside the model
            pil.fromarray(pixels).save(folder / f"{i:03d}.png")
            rows[f"{i:03d}.png"] = (pixels[None].astype(np.float32) / 255.0) / np.float32(STD)
        (folder / "003b.png").write_bytes(b"not a png at all")
        bad = {"003b.png": "cannot decode image", "004.png": "index 20 is out of range"}
        rows["003b.png"] = None
        return folder, rows, bad
    import pyarrow as pa
    import pyarrow.parquet as pq

    for name, data in (("a", _rows(1, 5)), ("c", _rows(2, 4, bad=2)), ("d", _rows(3, 3))):
        if kind == "npz":
            np.savez(folder / f"{name}.npz", input=data)
        else:
            pq.write_table(pa.table({"input": [row.reshape(-1).tolist() for row in data]}), folder / f"{name}.parquet")
        rows.update({f"{name}.{kind}[{i}]": row for i, row in enumerate(data)})
    (folder / f"b.{kind}").write_bytes(b"PK\x03\x04 this is not a valid file" * 4)
    rows[f"b.{kind}[0]"] = None
    bad = {f"b.{kind}[0]": f"cannot read the row count of '{folder / f'b.{kind}'}'",
           f"c.{kind}[2]": "index 50 is out of range"}
    return folder, dict(sorted(rows.items())), bad


@pytest.mark.parametrize("kind", ["npz", "image", "parquet"])
def test_a_corrupt_file_and_failing_rows_are_reported_and_the_rest_written_once(ray_local, gather_model, tmp_path,
                                                                                 capsys, kind):
    import pyarrow.parquet as pq

    folder, rows, bad = _folder(tmp_path, kind)
    extra = ["--std", str(STD)] if kind == "image" else []
    out = tmp_path / "out"
    argv = ["batch", gather_model, str(folder), str(out), "--rows-per-part", "3", "--batch-size", "2", *extra]
    assert main([*argv, "--on-error", "skip"]) == 0
    printed = capsys.readouterr().out
    table = pq.read_table(out).to_pydict()
    assert sorted(table["key"]) == sorted(rows)                       # every row once, the bad ones too
    assert f"{len(bad)} row(s) failed and were skipped" in printed
    for i, key in enumerate(table["key"]):
        if key in bad:
            assert table["y"][i] is None and bad[key] in table["error"][i], (key, table["error"][i])
            assert f"  {key}: " in printed and bad[key] in printed
        else:
            assert table["error"][i] is None, (key, table["error"][i])
            want = TABLE[rows[key].astype(np.int64)]                   # Cast and Gather: exact
            np.testing.assert_array_equal(np.asarray(table["y"][i], np.float32), want)

    corrupt = next(k for k in bad if rows[k] is None).removesuffix("[0]")
    assert main([*argv[:3], str(tmp_path / "out_fail"), *argv[4:], "--on-error", "fail"]) == 2
    err = capsys.readouterr().err
    assert corrupt in err, err


def test_a_part_whose_rows_all_failed_keeps_the_output_column_type(gather_model, tmp_path):
    """Its null column has the nested list type of the other parts, so the output reads as one table."""
    import pyarrow.parquet as pq

    from nnhal.batch import JobSpec, PartRunner
    from nnhal.batch.spec import Part

    np.savez(tmp_path / "good.npz", input=_rows(4, 2))
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    out = tmp_path / "out"
    out.mkdir()
    runner = PartRunner(JobSpec(model=gather_model, kind="npz"), str(out))
    assert [k for k, _ in runner.run_part(Part(0, ((str(tmp_path / "bad.npz"), 0, 1),)))] == ["bad.npz[0]"]
    assert runner.run_part(Part(1, ((str(tmp_path / "good.npz"), 0, 2),))) == []
    types = {p.name: pq.read_schema(p).field("y").type for p in out.glob("part-*.parquet")}
    assert len(types) == 2 and len(set(types.values())) == 1, types
    table = pq.read_table(out).to_pydict()
    assert table["key"] == ["bad.npz[0]", "good.npz[0]", "good.npz[1]"] and table["y"][0] is None
