"""ember-aotgrad: captured torch-level graphs down to functional aten graphs.

``aot_compile(gm, example_inputs, fw_compiler, ...)`` is the entry; see
docs/aotgrad.md for the contract and the core op set.
"""

from .aot import aot_compile, needs_backward
from .core import CORE_OPS, is_core
from .decompositions import default_decompositions, register_decomposition
from .errors import AotGradError
from .partition import Partition, default_partition, min_cut_partition
from .trace import trace_to_aten

__version__ = "0.2.0"

__all__ = [
    "CORE_OPS",
    "AotGradError",
    "Partition",
    "aot_compile",
    "default_decompositions",
    "default_partition",
    "is_core",
    "min_cut_partition",
    "needs_backward",
    "register_decomposition",
    "trace_to_aten",
]
