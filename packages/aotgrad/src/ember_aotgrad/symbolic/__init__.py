"""Symbolic sizes for traces that serve many input sizes (docs/dynamic.md).

``ShapeEnv`` owns the symbols and the guards a trace assumed; ``run_symbolic``
runs one aten op over tensors with symbolic sizes through the shape rules.
A name's module is imported when the name is first used: the modules that need
sympy load only for a trace that has symbols (values.py needs none).
"""

from ..lazy import lazy_names

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

__getattr__, __dir__ = lazy_names(__name__, _EXPORTS, globals())
