"""Side-by-side benchmarks of nnhal against onnxruntime (``nnhal bench``; see benchmarks/README.md)."""
