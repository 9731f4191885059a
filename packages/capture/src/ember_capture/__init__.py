"""ember-capture: CPython bytecode into torch.fx graphs, with guards.

``capture(fn, *args, **kwargs)`` interprets one call symbolically and returns the
graphs, the guards under which they may be reused, and the transformed function.
See docs/capture.md.
"""

from .call_routing import is_user_callable, route_calls
from .capture import capture, capture_frame
from .errors import CaptureError
from .guards import (
    CellView,
    Guard,
    GuardChecker,
    GuardKind,
    GuardSet,
    TensorSpec,
    module_has_no_hooks,
    module_has_only_forward_hooks,
)
from .meta_memo import check_meta_results, remember_meta_results
from .result import CapturedGraph, CaptureResult
from .resume import user_function_name
from .source import (
    AttrSource,
    ClosureSource,
    GlobalSource,
    ItemSource,
    LocalSource,
    SharedReads,
    Source,
)

__version__ = "0.2.0"

__all__ = [
    "AttrSource",
    "CaptureError",
    "CaptureResult",
    "CapturedGraph",
    "CellView",
    "ClosureSource",
    "GlobalSource",
    "Guard",
    "GuardChecker",
    "GuardKind",
    "GuardSet",
    "ItemSource",
    "LocalSource",
    "SharedReads",
    "Source",
    "TensorSpec",
    "capture",
    "capture_frame",
    "check_meta_results",
    "is_user_callable",
    "module_has_no_hooks",
    "module_has_only_forward_hooks",
    "remember_meta_results",
    "route_calls",
    "user_function_name",
]
