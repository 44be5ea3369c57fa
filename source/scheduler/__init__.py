"""Schedulers: the record (scheduler.py) and the default one (default.py)."""
