"""ember-capture: CPython bytecode into torch.fx graphs, with guards.

``capture(fn, *args, **kwargs)`` interprets one call symbolically and returns the
graphs, the guards under which they may be reused, and the transformed function.
See docs/capture.md.
"""

import importlib

__version__ = "0.2.0"

# Each public name and the module that defines it. A module is imported when one
# of its names is first used, so ``import ember_capture`` stays cheap for a
# program that only compiles later (docs/architecture.md, "Import cost").
_EXPORTS = {
    "is_user_callable": "call_routing",
    "route_calls": "call_routing",
    "capture": "entry",
    "capture_call": "entry",
    "capture_frame": "entry",
    "CaptureError": "errors",
    "CellView": "checks",
    "Guard": "guards",
    "GuardChecker": "guards",
    "GuardKind": "guards",
    "GuardSet": "guards",
    "SizeRelation": "guards",
    "TensorSpec": "checks",
    "module_has_no_hooks": "checks",
    "module_has_only_forward_hooks": "checks",
    "call_in_graph": "marks",
    "called_in_graph": "marks",
    "never_capture": "marks",
    "never_captured": "marks",
    "check_meta_results": "meta_memo",
    "remember_meta_results": "meta_memo",
    "CapturedGraph": "result",
    "CaptureResult": "result",
    "user_function_name": "names",
    "DynamicDims": "shapes",
    "SymbolicShapes": "shapes",
    "AttrSource": "source",
    "ClosureSource": "source",
    "GlobalSource": "source",
    "ItemSource": "source",
    "LocalSource": "source",
    "SharedReads": "source",
    "Source": "source",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
    globals()[name] = value = getattr(module, name)
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
