"""Symbolic sizes for traces that serve many input sizes (docs/dynamic.md).

``ShapeEnv`` owns the symbols and the guards a trace assumed; ``run_symbolic``
runs one aten op over tensors with symbolic sizes through the shape rules.
A name's module is imported when the name is first used: the modules that need
sympy load only for a trace that has symbols (values.py needs none).
"""

import importlib

_EXPORTS = {
    "SizeNodes": "fx",
    "predicate": "fx",
    "to_python": "fx",
    "SymbolicMode": "propagate",
    "concrete": "propagate",
    "run_symbolic": "propagate",
    "symbolic_tensor": "propagate",
    "Layout": "rules",
    "shape_rule": "rules",
    "ShapeEnv": "sym",
    "SymNode": "sym",
    "expr_of": "sym",
    "hint_of": "values",
    "NoShapeRule": "values",
    "has_symbols": "values",
    "is_symbolic": "values",
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
