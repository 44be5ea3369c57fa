"""The benchmark scripts (benchmarks/*.py) loaded as modules for their tests."""
import importlib.util
import os

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")


def load_script(filename: str, module_name: str):
    """benchmarks/``filename`` executed as a module named ``module_name``."""
    spec = importlib.util.spec_from_file_location(module_name, os.path.join(BENCHMARKS, filename))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
