"""Import statements inside captured code. A module that is already imported is
read from ``sys.modules``, as Python's import would find it, and guarded by
identity; importing one that is not yet imported would run its code, so it
breaks the graph instead: the transformed code imports it for real there and
resumes after."""

from __future__ import annotations

import importlib.util
import sys
from typing import TYPE_CHECKING

from .behaviour import get_attr
from .source import ImportSource
from .variables import Value

if TYPE_CHECKING:
    from .bytecode_interp import Interpreter


def import_name(
    tx: Interpreter, name: str, fromlist: tuple | None, level: int
) -> Value:
    """``__import__(name, globals, None, fromlist, level)``: the module named
    (with a ``fromlist``) or its top-level package (without one)."""
    full = name
    if level:
        package = tx.f_globals.get("__package__") or ""
        full = importlib.util.resolve_name("." * level + name, package)
    parts = full.split(".")
    for i in range(1, len(parts) + 1):
        prefix = ".".join(parts[:i])
        if prefix not in sys.modules:
            raise tx.unsupported(
                f"importing {full}, which is not imported yet (importing runs "
                f"its code)",
                f"import {full} at the top of the module",
            )
    return module_value(tx, full if fromlist else parts[0])


def import_from(tx: Interpreter, module: Value, attr: str) -> Value:
    """``from module import attr``: the attribute, else the submodule
    ``module.attr`` when it is imported, as Python's IMPORT_FROM does."""
    real = module.value
    if hasattr(real, attr):
        return get_attr(tx, module, attr)
    submodule = f"{real.__name__}.{attr}"
    if submodule in sys.modules:
        return module_value(tx, submodule)
    raise tx.unsupported(f"importing {attr} from {real.__name__} (ImportError)")


def module_value(tx: Interpreter, name: str) -> Value:
    """``sys.modules[name]``, guarded by identity in user code (torch's own code
    is trusted, as its globals are)."""
    module = sys.modules[name]
    if tx.globals_source is None:
        return tx.output.wrap_trusted(module)
    return tx.output.wrap(module, ImportSource(name))
