"""nnhal: a pluggable-device neural-network inference engine.

The public API is what this module exports; everything else is internal.
"""
from nnhal.api import (
    Context,
    GraphHandle,
    create_context,
    create_graph,
    destroy_graph,
    devices,
    explain,
    get_graph_output,
    init,
    postrun_graph,
    prerun_graph,
    profile,
    release,
    report,
    run_graph,
    set_graph_input,
    wait_graph,
)
from nnhal.errors import (
    DeviceError,
    InputError,
    InternalError,
    LimitError,
    ModelError,
    NnhalError,
    OptionsError,
    RegistryError,
    ShapeError,
    StateError,
    UnsupportedError,
    UnsupportedOperatorError,
    UnsupportedTypeError,
)
from nnhal.optimizer.calibrate import calibrate
from nnhal.options import Options
from nnhal.profiling import NodeTime, Profile, SubgraphTime
from nnhal.session import Session

__version__ = "0.1.0"

__all__ = [
    "Context", "DeviceError", "GraphHandle", "InputError", "InternalError", "LimitError", "ModelError", "NnhalError",
    "Options", "OptionsError", "RegistryError", "Session", "ShapeError", "StateError", "UnsupportedError",
    "UnsupportedOperatorError", "UnsupportedTypeError", "calibrate", "create_context", "create_graph",
    "destroy_graph", "devices", "explain", "get_graph_output", "init", "postrun_graph", "prerun_graph", "profile",
    "release", "report", "run_graph", "set_graph_input", "wait_graph", "NodeTime", "Profile", "SubgraphTime",
]
