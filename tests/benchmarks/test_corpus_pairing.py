"""The corpus benchmark's fp16/fp32 statistic: paired runs alternating in one block (benchmarks/corpus.py)."""
import pytest

from tests.benchmarks import load_script


@pytest.fixture(scope="module")
def corpus():
    return load_script("corpus.py", "corpus_benchmark")


def test_pairs_alternate_order_and_respect_bounds(corpus):
    calls = []
    pairs = corpus.paired(lambda: calls.append("a"), lambda: calls.append("b"), budget=0.0, most=6)
    assert len(pairs) == 3                      # at least 3 pairs even with no budget
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert len(corpus.paired(lambda: None, lambda: None, budget=10.0, most=5)) == 5


def test_paired_ratio_is_the_median_of_per_pair_ratios(corpus):
    # a slow moment that hits both runs of a pair (the 4.0 pairs) leaves their ratio as it is
    pairs = [(1.0, 1.1), (4.0, 4.4), (4.0, 4.4), (1.0, 1.1), (1.0, 1.1)]
    assert corpus.paired_ratio(pairs) == pytest.approx(1.1)
    assert corpus.paired_ratio([(2.0, 1.0), (1.0, 3.0), (1.0, 1.0)]) == pytest.approx(1.0)
