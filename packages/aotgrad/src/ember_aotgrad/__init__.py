"""ember-aotgrad: captured torch-level graphs down to functional aten graphs.

``aot_compile(gm, example_inputs, fw_compiler, ...)`` is the entry; see
docs/aotgrad.md for the contract and the core op set.
"""

from .aot import aot_compile, needs_backward
from .errors import AotGradError
from .trace import trace_to_aten

__version__ = "0.1.0"

__all__ = ["AotGradError", "aot_compile", "needs_backward", "trace_to_aten"]
