"""Thin wrapper: python benchmarks/bench.py [options] == nnhal bench [options]."""
import sys

from nnhal.benchmark.run import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
