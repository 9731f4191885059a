"""The lowering registry with every family's rules in it.

core.py holds the registry and the lowerer; each family's module (pointwise,
reduce, layout, index, scatter) registers its rules when imported. Lower
graphs through this module's names so that every family is registered,
whichever module a caller imported first.
"""

from . import (  # noqa: F401 - importing a family registers its rules
    index,
    layout,
    pointwise,
    reduce,
    scatter,
)
from .core import LOWERINGS, lower_graph, register

__all__ = ["LOWERINGS", "lower_graph", "register"]
