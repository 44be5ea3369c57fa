"""A local Ray cluster of 2 CPUs, started once for the tests of nnhal.ray and nnhal batch, and the digits data."""
from __future__ import annotations

from importlib import resources

import numpy as np
import pytest


@pytest.fixture(scope="package")
def ray_local():
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'nnhal[ray]')")
    pytest.importorskip("ray.data", reason="Ray Data is not installed (pip install 'nnhal[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="package")
def digits_model() -> str:
    return str(resources.files("nnhal.data").joinpath("digits_cnn.onnx"))


@pytest.fixture(scope="package")
def digits() -> np.ndarray:
    """40 deterministic 8x8 grey 'digits' in [0, 1], shaped as the digits CNN's rows [1, 8, 8]."""
    rng = np.random.default_rng(7)
    return rng.integers(0, 17, (40, 1, 8, 8)).astype(np.float32) / 16.0


def loop(model: str, rows: np.ndarray) -> np.ndarray:
    """The reference: a plain loop of Session.run, one row at a time, one thread."""
    import nnhal

    with nnhal.Session(model, num_thread=1) as s:
        return np.stack([s.run({"input": row[None]})[0][0] for row in rows])
