"""Device-independent passes: inference and folding, placement, split, precision."""
