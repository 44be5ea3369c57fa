"""The always-on numpy CPU device."""
