"""CPU kernels: one op per module, listed in ``table.py``."""
