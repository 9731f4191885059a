"""Symbolic sizes for traces that serve many input sizes (docs/dynamic.md).

``ShapeEnv`` owns the symbols and the guards a trace assumed; ``run_symbolic``
runs one aten op over tensors with symbolic sizes through the shape rules.
"""

from .fx import predicate, to_python
from .propagate import (
    SymbolicMode,
    concrete,
    has_symbols,
    run_symbolic,
    symbolic_tensor,
)
from .rules import Layout, NoShapeRule, shape_rule
from .sym import ShapeEnv, SymNode, expr_of, hint_of, is_symbolic

__all__ = [
    "Layout",
    "NoShapeRule",
    "ShapeEnv",
    "SymNode",
    "SymbolicMode",
    "concrete",
    "expr_of",
    "has_symbols",
    "hint_of",
    "is_symbolic",
    "predicate",
    "run_symbolic",
    "shape_rule",
    "symbolic_tensor",
    "to_python",
]
