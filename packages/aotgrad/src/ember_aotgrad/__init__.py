"""ember-aotgrad: captured torch-level graphs down to functional aten graphs.

``aot_compile(gm, example_inputs, fw_compiler, ...)`` is the entry;
``save_compiled_aot``/``load_compiled_aot`` store what it returns. See
docs/aotgrad.md for the contract and the core op set.
"""

from .aot import aot_compile, needs_backward
from .core import CORE_OPS, is_core
from .decompositions import default_decompositions, register_decomposition
from .errors import AotGradError
from .partition import Partition, default_partition, min_cut_partition
from .runtime_wrapper import BackwardPlan, CompiledAot
from .serialize import (
    LoadCompiled,
    SaveCompiled,
    load_compiled_aot,
    save_compiled_aot,
)
from .trace import GraphLayout, trace_to_aten

__version__ = "0.2.0"

__all__ = [
    "CORE_OPS",
    "AotGradError",
    "BackwardPlan",
    "CompiledAot",
    "GraphLayout",
    "LoadCompiled",
    "Partition",
    "SaveCompiled",
    "aot_compile",
    "default_decompositions",
    "default_partition",
    "is_core",
    "load_compiled_aot",
    "min_cut_partition",
    "needs_backward",
    "register_decomposition",
    "save_compiled_aot",
    "trace_to_aten",
]
