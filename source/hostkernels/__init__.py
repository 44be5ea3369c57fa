"""The host kernels: numpy reference math below the core, shared by every device that wants it.

One op per module (``op_<snake>.py``, listed in ``table.py``), each with one or more Kernel
implementations chosen by score (``select.py``); ``evaluate.py`` runs one node (constant folding),
``graphrun.py`` a whole graph (control-flow bodies, calibration); ``fused.py`` holds the records of
what a planner fused into a node; ``fixedpoint.py`` integer requantization; ``threads.py`` the BLAS
thread count. Nothing here imports a device folder, the optimizer or anything above
(tests/test_layering.py).
"""
