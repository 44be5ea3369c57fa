"""Operator prototypes: one op per file, looked up through ``table.py``."""
from nnhal.operator.base import REQUIRED, Info, Prototype
from nnhal.operator.table import get_prototype

__all__ = ["REQUIRED", "Info", "Prototype", "get_prototype"]
