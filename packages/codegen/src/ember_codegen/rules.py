"""The lowering registry with every family's rules in it.

lowering.py holds the registry and the lowerer; each ``lower_*`` module registers
its family's rules when imported. Lower graphs through this module's names so
that every family is registered, whichever module a caller imported first.
"""

from . import (  # noqa: F401 - importing a family registers its rules
    lower_index,
    lower_layout,
    lower_pointwise,
    lower_reduce,
    lower_scatter,
)
from .lowering import LOWERINGS, lower_graph, register

__all__ = ["LOWERINGS", "lower_graph", "register"]
