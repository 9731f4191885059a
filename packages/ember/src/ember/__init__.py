"""ember: one line, ``model = ember.compile(model)``, to compile PyTorch programs.

The umbrella over the four stages (ember_capture, ember_aotgrad, ember_codegen,
ember_runtime): compile, reset, explain, configuration, backends and logging.
"""

from .api import CompiledFunction, CompiledModule, compile, reset, stats
from .backends import BACKENDS, register_backend
from .config import Config
from .convert import BreakReason
from .dynamic import mark_dynamic, mark_static
from .explain import ExplainOutput, explain, profile
from .logs import apply_environment, set_logs

__version__ = "0.2.0"

apply_environment()

__all__ = [
    "BACKENDS",
    "BreakReason",
    "CompiledFunction",
    "CompiledModule",
    "Config",
    "ExplainOutput",
    "compile",
    "explain",
    "mark_dynamic",
    "mark_static",
    "profile",
    "register_backend",
    "reset",
    "set_logs",
    "stats",
]
