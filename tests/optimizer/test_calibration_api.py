"""The calibration API: Options/Session take a CalibrationTable, its ranges or a saved table's path, refuse
anything else with an OptionsError; calibrating on a one-shot iterator streams it with progress."""
from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path

import numpy as np
import pytest

import nnhal
from nnhal.errors import OptionsError
from nnhal.optimizer.calibrate import CalibrationTable

DIGITS = str(Path(nnhal.__file__).resolve().parent / "data" / "digits_cnn.onnx")


def _feeds(n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"input": rng.uniform(0, 1, (8, 1, 8, 8)).astype(np.float32)} for _ in range(n)]


@pytest.fixture(scope="module")
def table() -> CalibrationTable:
    return nnhal.calibrate(DIGITS, _feeds(3), method="percentile", percentile=99.9, progress=False)


def _uint8_logits(calibration) -> np.ndarray:
    with nnhal.Session(DIGITS, precision="uint8", calibration=calibration) as s:
        return s.run({"input": _feeds(1, seed=9)[0]["input"]})[0]


# ------------------------------------------------------------------ what is taken
def test_save_and_load_round_trip_exactly(table, tmp_path):
    path = tmp_path / "digits.calib.json"
    table.save(path)
    doc = json.loads(path.read_text())
    assert doc["format"] == "nnhal-calibration" and doc["version"] == 1 and doc["method"] == "percentile"
    again = CalibrationTable.load(str(path))
    assert again == table


def test_session_takes_the_table_its_ranges_and_a_saved_path_alike(table, tmp_path):
    path = tmp_path / "digits.calib.json"
    table.save(path)
    expected = _uint8_logits(table.ranges)
    for given in (table, str(path), path):     # bit equality: the same ranges, so the same model and kernels
        np.testing.assert_array_equal(_uint8_logits(given), expected)
    assert nnhal.Options(precision="uint8", calibration=table).calibration == table.ranges


@pytest.mark.parametrize("given, expected", [
    ([(0.0, 1.0)], "got list"),
    (3.5, "got float"),
    ({"input": (0.0,)}, "'input' must be two numbers"),
    ({"input": (1.0, 0.0)}, "finite min <= max"),
    ({"input": (0.0, float("nan"))}, "finite min <= max"),
    ("no/such/table.json", "cannot read the table"),
])
def test_anything_else_is_refused_naming_the_option(given, expected):
    with pytest.raises(OptionsError, match="calibration") as err:
        nnhal.Session(DIGITS, precision="uint8", calibration=given)
    assert expected in str(err.value)
    assert isinstance(err.value, nnhal.NnhalError)


def test_a_json_file_that_is_not_a_table_is_refused(tmp_path):
    path = tmp_path / "ranges.json"
    path.write_text(json.dumps({"input": [0, 1]}))
    with pytest.raises(OptionsError, match="is not a calibration table"):
        nnhal.Options(calibration=path)
    path.write_text(json.dumps({"format": "nnhal-calibration", "version": 99, "ranges": {}}))
    with pytest.raises(OptionsError, match="version 99"):
        nnhal.Options(calibration=path)


# ------------------------------------------------------------------ iterators
@pytest.mark.parametrize("method", ["minmax", "percentile"])
def test_a_one_shot_iterator_gives_the_same_table_as_a_list(method):
    feeds = _feeds(4)
    from_list = nnhal.calibrate(DIGITS, feeds, method=method, progress=False)
    from_iterator = nnhal.calibrate(DIGITS, iter(feeds), method=method, progress=False)
    assert from_iterator == from_list and from_iterator.batches == 4


def test_an_iterator_is_read_one_feed_at_a_time():
    alive: list[weakref.ref] = []
    most = []

    def generate():
        for seed in range(6):
            feed = _feeds(1, seed)[0]          # made here: only the consumer can keep it alive
            gc.collect()
            most.append(sum(r() is not None for r in alive))
            alive.append(weakref.ref(feed["input"]))
            yield feed

    nnhal.calibrate(DIGITS, generate(), method="percentile", progress=False)
    assert len(most) == 6 and max(most) <= 1       # only the feed being processed is still held


def test_an_iterator_shows_progress(capsys):
    nnhal.calibrate(DIGITS, iter(_feeds(10)), method="percentile", progress=True)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "calibrate (percentile) pass 1/2: ? batch(es)"
    assert "calibrate (percentile) pass 1/2: 10 so far" in err
    assert err[-1].startswith("calibrate (percentile) pass 2/2: done, 10 batch(es)")
