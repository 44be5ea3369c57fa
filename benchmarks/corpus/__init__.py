"""The corpus of benchmarks/corpus.py: architectures (nets.py, graphs.py) and their table (registry.py)."""
