"""Devices: the record (device.py), the manager, and one folder per device."""
