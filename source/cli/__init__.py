"""The `nnhal` command line."""
