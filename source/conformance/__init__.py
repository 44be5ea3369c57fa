"""Conformance kit: the ONNX backend node suite, the tolerance policy, random graphs."""
