"""ember: one line, ``model = ember.compile(model)``, to compile PyTorch programs.

The umbrella over the four stages (ember_capture, ember_aotgrad, ember_codegen,
ember_runtime): compile, reset, explain, configuration, backends, logging,
and torch.compiler's toolbox (disable, allow_in_graph, set_stance, ...).
"""

from .api import CompiledFunction, CompiledModule, compile, reset, stats
from .backends import BACKENDS, register_backend
from .config import Config
from .convert import BreakReason
from .dynamic import mark_dynamic, mark_static
from .explain import ExplainOutput, explain, profile
from .html_report import report
from .logs import apply_environment, set_logs
from .toolbox import (
    allow_in_graph,
    compile_module_,
    disable,
    is_compiling,
    list_backends,
    set_stance,
)

__version__ = "0.2.0"

apply_environment()

__all__ = [
    "BACKENDS",
    "BreakReason",
    "CompiledFunction",
    "CompiledModule",
    "Config",
    "ExplainOutput",
    "allow_in_graph",
    "compile",
    "compile_module_",
    "disable",
    "explain",
    "is_compiling",
    "list_backends",
    "mark_dynamic",
    "mark_static",
    "profile",
    "register_backend",
    "report",
    "reset",
    "set_logs",
    "set_stance",
    "stats",
]
