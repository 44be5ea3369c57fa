"""The host kernels: numpy reference math below the core, shared by every device that wants it.

One op per module (``op_<snake>.py``, listed in ``table.py``), each with one or more Kernel
implementations chosen by score (``select.py``); ``evaluate.py`` runs one node (constant folding),
``graphrun.py`` a whole graph (control-flow bodies, the interpreter of the optimizer's runs);
``fused.py`` holds the records of what a planner fused into a node; ``fixedpoint.py`` integer
requantization; ``windows.py`` im2col. Every kernel here is numpy: the cpu device's native, pooled and
channels-last kernels are its own (device/cpu/kernels/). Nothing here imports a device, the optimizer or
anything above (tests/test_layering.py).
"""
