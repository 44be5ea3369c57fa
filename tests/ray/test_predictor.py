"""nnhal.ray.Predictor in process, and on Ray Data with 2 actors (results, a killed actor, a malformed row)."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

from nnhal.errors import InputError, OptionsError
from nnhal.ray import Predictor
from tests.ray.conftest import loop


def fixed_batch(model: str, size: int) -> onnx.ModelProto:
    """The digits CNN with its batch dim fixed to ``size``."""
    proto = onnx.load(model)
    for vi in list(proto.graph.input) + list(proto.graph.output):
        vi.type.tensor_type.shape.dim[0].dim_value = size
    return proto


def test_predict_splits_and_pads_to_a_fixed_batch(digits_model, digits):
    rows = digits[:7]
    pred = Predictor(fixed_batch(digits_model, 3)).predict({"input": rows})   # runs of 3, 3, 1 + 2 padding
    assert pred.ok.all() and not pred.errors
    np.testing.assert_allclose(pred.outputs["logits"], loop(digits_model, rows), rtol=1e-5, atol=1e-5)
    with pytest.raises(OptionsError, match="fixes its batch size to 3"):
        Predictor(fixed_batch(digits_model, 3), batch_size=4)


def test_predict_reports_bad_rows_by_key(digits_model, digits):
    column = [digits[0], digits[1][:, :, :7], digits[2], "text"]
    batch = {"input": np.array(column + [digits[3]], dtype=object), "id": np.array(["a", "b", "c", "d", "e"])}
    p = Predictor(digits_model, batch_size=2, key_column="id", outputs={"logits": "scores"})
    pred = p.predict(batch)
    assert pred.ok.tolist() == [True, False, True, False, True]
    assert "[1x8x8], got [1, 8, 7]" in pred.errors[1] and "expects float32" in pred.errors[3]
    np.testing.assert_allclose(pred.outputs["scores"], loop(digits_model, digits[[0, 2, 3]]), rtol=1e-5, atol=1e-5)
    out = p(batch)
    assert out["id"].tolist() == ["a", "c", "e"] and out["scores"].shape == (3, 10)
    with pytest.raises(InputError, match="outputs maps \\['probs'\\]"):
        Predictor(digits_model, outputs={"probs": "p"})
    with pytest.raises(InputError, match="^b: input 'input'"):
        Predictor(digits_model, key_column="id", on_error="fail").predict(batch)


def test_quantized_precision_needs_shared_calibration(digits_model):
    with pytest.raises(OptionsError, match="calibration"):
        Predictor(digits_model, precision="int8")


def _rows(digits: np.ndarray) -> list[dict]:
    return [{"id": i, "input": digits[i]} for i in range(len(digits))]


def _by_id(rows: list[dict]) -> tuple[list[int], np.ndarray]:
    rows = sorted(rows, key=lambda r: r["id"])
    return [r["id"] for r in rows], np.stack([r["logits"] for r in rows])


def test_map_batches_on_two_actors_equals_a_loop(ray_local, digits_model, digits):
    import ray.data

    import nnhal.ray

    ds = ray.data.from_items(_rows(digits), override_num_blocks=4)
    out = nnhal.ray.map_batches(ds, digits_model, actors=2, threads=1, batch_size=1, rows_per_batch=5)
    ids, logits = _by_id(out.take_all())
    assert ids == list(range(len(digits)))
    np.testing.assert_array_equal(logits, loop(digits_model, digits))


class DyingPredictor(Predictor):
    """Kills its actor's process the first time it sees row ``victim`` (a marker file remembers it)."""

    def __init__(self, marker: str, victim: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.marker, self.victim = marker, victim

    def __call__(self, batch):
        if self.victim in batch["id"] and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        return super().__call__(batch)


def test_killed_actor_is_restarted_and_every_row_comes_once(ray_local, digits_model, digits, tmp_path):
    import ray.data

    import nnhal.ray

    marker = tmp_path / "killed"
    ds = ray.data.from_items(_rows(digits), override_num_blocks=8)
    out = ds.map_batches(DyingPredictor, batch_size=5, batch_format="numpy",
                         fn_constructor_kwargs={"marker": str(marker), "victim": 23, "model": digits_model,
                                               "batch_size": 1},
                         **nnhal.ray.actor_options(actors=2, threads=1, max_restarts=2, max_task_retries=2))
    ids, logits = _by_id(out.take_all())
    assert marker.exists(), "the victim row never reached an actor"
    assert ids == list(range(len(digits)))
    np.testing.assert_array_equal(logits, loop(digits_model, digits))


def test_malformed_row_is_skipped_on_ray(ray_local, digits_model, digits):
    import ray.data

    import nnhal.ray

    rows = _rows(digits[:12])
    rows[5]["input"] = digits[5][:, :7, :]
    ds = ray.data.from_items(rows, override_num_blocks=2)
    out = nnhal.ray.map_batches(ds, digits_model, actors=2, batch_size=1, key_column="id", keep_columns=["id"])
    ids, logits = _by_id(out.take_all())
    assert ids == [i for i in range(12) if i != 5]
    np.testing.assert_array_equal(logits, loop(digits_model, digits[ids]))
