"""Models nnhal builds itself (for tests and benchmarks): a BERT-style encoder."""
